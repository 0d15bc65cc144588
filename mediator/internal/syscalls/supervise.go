package syscalls

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// supervise keeps a proxy running: start it, receive its results until it
// dies, fail what it held with EIO, and start another after a backoff that
// doubles while proxies die young.
func (f *Forwarder) supervise() {
	defer f.wg.Done()
	delay := f.cfg.Load().RestartDelay
	for {
		started := time.Now()
		err := f.runProxy()
		if f.stopped() {
			return
		}
		f.stats.restarts.Add(1)
		f.log.Warn("syscall proxy ended; its calls failed with EIO", "err", err, "restart_in", delay)
		f.setState(fmt.Sprintf("down: %v", err))
		if time.Since(started) > 10*delay {
			delay = f.cfg.Load().RestartDelay
		}
		select {
		case <-f.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, MaxRestartDelay)
	}
}

func (f *Forwarder) stopped() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

func (f *Forwarder) setState(s string) {
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
}

// runProxy starts one proxy and serves its results until it ends.
func (f *Forwarder) runProxy() error {
	p, err := f.spec.Start()
	if err != nil {
		return fmt.Errorf("starting the proxy: %w", err)
	}
	s, err := newSock(p.Conn())
	if err != nil {
		return errors.Join(err, p.Close())
	}
	defer s.close()
	if err := handshake(s); err != nil {
		return errors.Join(err, p.Close())
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return p.Close()
	}
	f.proxy, f.sock, f.state = p, s, "running"
	f.mu.Unlock()
	f.log.Info("syscall proxy running", "pid", p.Pid())
	f.Kick()
	err = f.receive(s)
	f.mu.Lock()
	f.proxy, f.sock = nil, nil
	f.state = "down"
	f.failInflightLocked()
	f.mu.Unlock()
	s.shutdown()
	return errors.Join(err, p.Close())
}

func handshake(s *sock) error {
	buf := make([]byte, 4096)
	n, err := s.recvTimeout(buf, 10*time.Second)
	if err != nil {
		return fmt.Errorf("waiting for the proxy to be ready: %w", err)
	}
	msg := buf[:n]
	if proxyproto.Type(msg) == proxyproto.MsgFatal {
		return fmt.Errorf("proxy failed to start: %s", proxyproto.DecodeFatal(msg))
	}
	v, _, err := proxyproto.DecodeReady(msg)
	if err != nil {
		return err
	}
	if v != proxyproto.Version {
		return fmt.Errorf("proxy speaks protocol %d, this mediator %d", v, proxyproto.Version)
	}
	return nil
}

// failInflightLocked fails every call the dead proxy held with EIO.
func (f *Forwarder) failInflightLocked() {
	for i, s := range f.inflight {
		if s != 0 {
			f.inflight[i] = 0
			f.finish(uint32(i), s-1, -1, abi.ErrnoIO)
		}
	}
	f.nIn = 0
}

// receive reads the proxy's messages until its socket fails.
func (f *Forwarder) receive(s *sock) error {
	defer lockThread()()
	buf := make([]byte, proxyproto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	var res []proxyproto.Result
	for {
		n, oobn, err := s.recv(buf, oob)
		if err != nil {
			return fmt.Errorf("reading from the proxy: %w", err)
		}
		if n == 0 {
			return errors.New("the proxy closed its socket")
		}
		msg := buf[:n]
		switch proxyproto.Type(msg) {
		case proxyproto.MsgResults:
			if res, err = proxyproto.DecodeResults(res[:0], msg); err != nil {
				return err
			}
			f.deliver(res)
		case proxyproto.MsgFastcall:
			if err := f.addFastcall(msg, oob[:oobn]); err != nil {
				return err
			}
		case proxyproto.MsgFatal:
			return fmt.Errorf("proxy failed: %s", proxyproto.DecodeFatal(msg))
		default:
			return fmt.Errorf("%w: type %d", proxyproto.ErrMessage, proxyproto.Type(msg))
		}
	}
}

// deliver writes results whose slot still waits for exactly that call.
func (f *Forwarder) deliver(res []proxyproto.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range res {
		if !f.claimLocked(r.Slot, r.Seq) {
			continue // a non-blocking call's result, or a stale one
		}
		f.finish(r.Slot, r.Seq, r.Ret, r.Errno)
	}
}

// claimLocked ends the tracking of slot's call with sequence seq.
func (f *Forwarder) claimLocked(slot, seq uint32) bool {
	if int(slot) >= len(f.inflight) || f.inflight[slot] != seq+1 {
		return false
	}
	f.inflight[slot] = 0
	f.nIn--
	return true
}
