package syscalls

import (
	"encoding/binary"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// fakeProxy serves a Calls batch in a goroutine: null returns 0, every other
// call returns args[0]+1 after hold (if set), fastcall_register opens
// fastFile and hands it over. It records every request it got.
type fakeProxy struct {
	mine, theirs *net.UnixConn
	pid          int
	hold         chan struct{} // when not nil, each call waits for a receive

	mu   sync.Mutex
	seen []proxyproto.Request
}

func (p *fakeProxy) Conn() *net.UnixConn    { return p.mine }
func (p *fakeProxy) CPUTime() time.Duration { return 0 }
func (p *fakeProxy) Pid() int               { return p.pid }
func (p *fakeProxy) Close() error {
	p.theirs.Close()
	return p.mine.Close()
}

func (p *fakeProxy) requests() []proxyproto.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxyproto.Request(nil), p.seen...)
}

func seqpacketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func (p *fakeProxy) serve(fastFile string) {
	p.theirs.Write(proxyproto.AppendReady(nil, p.pid))
	buf := make([]byte, proxyproto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	var (
		rg   *proxyproto.Ring
		head uint64
		tail atomic.Uint64
	)
	for {
		n, oobn, _, _, err := p.theirs.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		var reqs []proxyproto.Request
		switch proxyproto.Type(buf[:n]) {
		case proxyproto.MsgRing:
			l, size, _, err := proxyproto.DecodeRing(buf[:n])
			if err != nil {
				return
			}
			fd, err := onlyFD(oob[:oobn])
			if err != nil {
				return
			}
			mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			unix.Close(fd)
			if err != nil {
				return
			}
			defer unix.Munmap(mem)
			if rg, err = proxyproto.OpenRing(mem, l); err != nil {
				return
			}
		case proxyproto.MsgKick:
		default:
			if reqs, err = proxyproto.DecodeCalls(nil, buf[:n]); err != nil {
				return
			}
		}
		if rg != nil {
			// Never spins: idle before each look, so every batch kicks.
			rg.ProxyIdle(true)
			if reqs, head, err = rg.ProxyRequests(reqs, head); err != nil {
				return
			}
			rg.ProxyConsumed(head)
		}
		var res []proxyproto.Result
		for _, r := range reqs {
			p.mu.Lock()
			p.seen = append(p.seen, r)
			p.mu.Unlock()
			if p.hold != nil {
				<-p.hold
			}
			switch r.Number {
			case abi.SysNull:
				res = append(res, proxyproto.Result{Slot: r.Slot, Seq: r.Seq})
			case abi.SysFastcallRegister:
				fd, err := unix.Open(fastFile, unix.O_RDWR, 0)
				if err != nil {
					res = append(res, proxyproto.Result{Slot: r.Slot, Seq: r.Seq, Ret: -1, Errno: abi.ErrnoNOENT})
					continue
				}
				msg := proxyproto.AppendFastcall(nil, proxyproto.Fastcall{Slot: r.Slot, Seq: r.Seq, Op: uint16(r.Args[0]), HeapOff: r.Args[2], Length: r.Args[3], FileOff: r.Args[4]})
				p.theirs.WriteMsgUnix(msg, unix.UnixRights(fd), nil)
				unix.Close(fd)
			case abi.SysGetrusage:
				res = append(res, proxyproto.Result{Slot: r.Slot, Seq: r.Seq, Ret: int64(r.Aux)})
			default:
				res = append(res, proxyproto.Result{Slot: r.Slot, Seq: r.Seq, Ret: int64(r.Args[0] + 1)})
			}
		}
		switch {
		case len(res) == 0:
		case rg == nil:
			p.theirs.Write(proxyproto.AppendResults(nil, res))
		default:
			for _, r := range res {
				for !rg.ProxyTryPut(&tail, r) {
					time.Sleep(10 * time.Microsecond)
				}
			}
			if rg.ProxyKickMediator() {
				p.theirs.Write([]byte{proxyproto.MsgKick})
			}
		}
	}
}

// rig is a forwarder over a private area and heap with fake proxies.
type rig struct {
	t       *testing.T
	area    *shm.Region
	heap    []byte
	f       *Forwarder
	starts  atomic.Int32
	mu      sync.Mutex
	proxies []*fakeProxy
	hold    chan struct{}
	file    string
	gpuNs   atomic.Uint64
}

const rigSlots = 64

func newRig(t *testing.T, cfg Config, hold bool) *rig { return newHostileRig(t, cfg, hold, nil) }

// newHostileRig's proxies, when hostile is set, answer nothing and forge
// results from hostile's bytes instead (scribble).
func newHostileRig(t *testing.T, cfg Config, hold bool, hostile []byte) *rig {
	// The area is a mapping, as in production: a guest's stores race with
	// the host's by design (the hostile tests make them), and the race
	// detector does not watch mappings.
	// The heap too: what orders it is the area's atomics, which the race
	// detector then does not see.
	area, _ := mapShared(t, int(abi.SyscallAreaSize(rigSlots)))
	heap, _ := mapShared(t, 1<<16)
	r := &rig{t: t, area: shm.New(area), heap: heap}
	if hold {
		r.hold = make(chan struct{})
	}
	r.file = t.TempDir() + "/data"
	if err := os.WriteFile(r.file, []byte("hello, fastcall world"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := New(Spec{
		Name: "test", Area: r.area, Slots: rigSlots, Heap: r.heap,
		GPUNs: r.gpuNs.Load,
		Start: func() (Proxy, error) {
			a, b := seqpacketPair(t)
			p := &fakeProxy{mine: a, theirs: b, pid: 1000 + int(r.starts.Add(1)), hold: r.hold}
			r.mu.Lock()
			r.proxies = append(r.proxies, p)
			r.mu.Unlock()
			if hostile != nil {
				go p.scribble(hostile)
			} else {
				go p.serve(r.file)
			}
			return p, nil
		},
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.f = f
	t.Cleanup(func() { f.Close() })
	return r
}

func (r *rig) proxy(i int) *fakeProxy {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proxies[i]
}

// publish writes a call into slot i as a guest does: POPULATING, fields,
// READY last.
func (r *rig) publish(i uint32, s abi.Slot) {
	off := abi.SlotOff(i)
	var b [abi.SyscallSlotSize]byte
	r.area.Store32(off+abi.SysState, abi.SlotWord(abi.SlotPopulating, s.Seq))
	abi.EncodeSlot(b[:], s)
	r.area.CopyIn(off+4, b[4:])
	r.area.Store32(off+abi.SysState, abi.SlotWord(abi.SlotReady, s.Seq))
}

func (r *rig) state(i uint32) (abi.SlotState, uint32) {
	return abi.SplitSlotWord(r.area.Load32(abi.SlotOff(i) + abi.SysState))
}

// wait polls slot i until it reaches want, and returns ret and errno.
func (r *rig) wait(i uint32, want abi.SlotState) (int64, abi.Errno) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, _ := r.state(i); st == want {
			off := abi.SlotOff(i)
			return int64(r.area.Load64(off + abi.SysRet)), abi.Errno(r.area.Load64(off + abi.SysErrno))
		}
		if time.Now().After(deadline) {
			st, seq := r.state(i)
			r.t.Fatalf("slot %d: %v seq %d, want %v", i, st, seq, want)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// call makes one blocking call on slot i and frees the slot.
func (r *rig) call(i uint32, nr uint16, flags uint8, args ...uint64) (int64, abi.Errno) {
	r.t.Helper()
	_, seq := r.state(i)
	s := abi.Slot{Seq: seq, Number: nr, Flags: flags | abi.SysFlagBlocking}
	copy(s.Args[:], args)
	r.publish(i, s)
	ret, errno := r.wait(i, abi.SlotFinished)
	r.area.Store32(abi.SlotOff(i)+abi.SysState, abi.SlotWord(abi.SlotFree, abi.NextSeq(seq)))
	return ret, errno
}

// scribble is a compromised proxy: on the ring's arrival and on every kick
// it forges a ring's worth of published results from data (slot, seq, ret,
// errno; marks exactly where the mediator's consumer looks), writes data
// over the request head and its idle word, and kicks the mediator.
func (p *fakeProxy) scribble(data []byte) {
	p.theirs.Write(proxyproto.AppendReady(nil, p.pid))
	buf := make([]byte, proxyproto.MaxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	var (
		mem []byte
		l   proxyproto.RingLayout
		pos uint64
	)
	word := func(i int) uint64 {
		var v uint64
		for k := range 8 {
			if len(data) > 0 {
				v |= uint64(data[(i*8+k)%len(data)]) << (8 * k)
			}
		}
		return v
	}
	for {
		n, oobn, _, _, err := p.theirs.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		if proxyproto.Type(buf[:n]) == proxyproto.MsgRing {
			var size int
			if l, size, _, err = proxyproto.DecodeRing(buf[:n]); err != nil {
				return
			}
			fd, err := onlyFD(oob[:oobn])
			if err != nil {
				return
			}
			mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			unix.Close(fd)
			if err != nil {
				return
			}
			defer unix.Munmap(mem)
		}
		if mem == nil {
			continue
		}
		le := binary.LittleEndian
		le.PutUint64(mem[128:], word(0))         // request head
		le.PutUint32(mem[192:], uint32(word(1))) // proxy idle
		resOff := (proxyproto.RingHdrSize + int(l.ReqCap)*proxyproto.RequestSize + 63) &^ 63
		for i := range int(l.ResCap) {
			rec := mem[resOff+int((pos+uint64(i))%uint64(l.ResCap))*proxyproto.ResultStride:]
			w := word(2 + i)
			if w%2 == 0 { // a small slot number, so some land on calls in flight
				w &= 0xff_0000_00ff
			}
			le.PutUint64(rec[8:], w)
			le.PutUint64(rec[16:], word(3+i))
			le.PutUint64(rec[24:], word(4+i))
			le.PutUint64(rec[0:], pos+uint64(i)+1)
		}
		pos += uint64(l.ResCap)
		p.theirs.Write([]byte{proxyproto.MsgKick})
		time.Sleep(time.Millisecond)
	}
}
