package cuda

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// A VM's GPU worker outlives a hand-over to a successor process (Keep, and
// Attach with VMSpec.Adopt): sluiced re-executes itself with the same pid,
// so the worker stays its child, and its context, buffers, modules and
// request ring claim counter (all in the worker) stay as they were. What
// the mediator's side holds goes over in the Kept: four descriptors,
//
//	0 the mediator's end of the worker's socket
//	1 the shared block's memfd
//	2 the worker's doorbell eventfd
//	3 a pidfd of the worker process
//
// and keptData (JSON). The heap's and the syscall area's files are the
// VM's region, which the successor has anyway (VMSpec.HeapFile,
// SyscallFile): keptData names them by device and inode, so that the
// worker's mappings are known to be of the files the successor serves.
const (
	keptSock = iota
	keptShared
	keptDoorbell
	keptPidfd
	keptFDs
)

// workerProtocol numbers what a worker and the mediator exchange (the
// messages and the shared block's layout). A successor only adopts a
// worker of its own protocol: the worker runs the predecessor's binary.
// Change it with either. 3: a query's answer carries the query's nonce.
// 4: ring entries of 128 bytes with a stamp, which the worker reads
// instead of the tail; a THROTTLE's code stamped after its launch call.
const workerProtocol = 4

// keepWait bounds how long Keep waits for the VM's commands in flight
// (those the hand-over's own wait did not see complete), and queryWait how
// long a worker has to answer Keep's query. adoptWait bounds a whole
// adoption (Attach with VMSpec.Adopt): proving the worker, settling it
// after a crash and every query of it, one budget, so that a worker that
// answers slowly or never gets idle delays its VM's start (and, through
// the daemon's restore, which adopts the VMs in parallel, the others')
// by that much at most.
const (
	keepWait  = 5 * time.Second
	queryWait = 5 * time.Second
	adoptWait = 5 * time.Second
)

var _ backend.Keeper = (*cudaVM)(nil)

// workerState is a worker's answer to a query: who it is, what it holds
// and whether it is idle.
type workerState struct {
	Protocol int          `json:"protocol"`
	Config   workerConfig `json:"config"`
	Device   string       `json:"device"`
	Head     uint64       `json:"head"` // the ring entries it has taken
	Last     []uint64     `json:"last"` // each channel's last command issued
	Busy     bool         `json:"busy"` // a channel has work on the GPU
	Buffers  int          `json:"buffers"`
	Modules  int          `json:"modules"`
	MemUsed  uint64       `json:"mem_used"`
	// The heap's and the syscall area's files it mapped (nil: none, or a
	// worker goroutine's, which maps nothing).
	Heap     *fileID `json:"heap,omitempty"`
	Syscalls *fileID `json:"syscalls,omitempty"`
}

// state describes the worker (its answer to a query).
func (w *worker) state() workerState {
	st := workerState{
		Protocol: workerProtocol, Config: w.cfg, Device: w.device, Head: w.blk.load(offHead), Busy: w.busy(),
		Buffers: len(w.bufs), Modules: len(w.mods), MemUsed: w.memUsed, Heap: w.files[0], Syscalls: w.files[1],
	}
	for _, ch := range w.chans {
		st.Last = append(st.Last, ch.last)
	}
	return st
}

// keptData is what the mediator's side of a kept VM holds beyond the
// descriptors. Seqs are the mediator's last command numbers per channel
// and Ends the end markers the idle worker left, which its Last equals:
// they differ where a worker ended with commands in flight and its
// successor issued nothing since.
type keptData struct {
	Protocol int      `json:"protocol"`
	Tail     uint64   `json:"tail"`
	Seqs     []uint64 `json:"seqs"`
	Ends     []uint64 `json:"ends"`
	Buffers  int      `json:"buffers"`
	Modules  int      `json:"modules"`
	MemUsed  uint64   `json:"mem_used"`
	Heap     *fileID  `json:"heap,omitempty"`
	Syscalls *fileID  `json:"syscalls,omitempty"`
}

// fileID names a file by device and inode.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

func (f *fileID) String() string {
	if f == nil {
		return "none"
	}
	return fmt.Sprintf("%d:%d", f.Dev, f.Ino)
}

// idOf is fd's file's identity; nil for -1.
func idOf(fd int) (*fileID, error) {
	if fd < 0 {
		return nil, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	return &fileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// Keep hands the VM's GPU worker over, with its context and all in it, for
// a successor's Attach (VMSpec.Adopt). It shuts the VM as Close does (no
// Submit any more), waits up to keepWait for the commands in flight to
// complete (their completions are the caller's to drop: they run again in
// the successor, where an ALLOC, FREE or LOAD_MODULE among them then fails
// with abi.ErrBadHandle, its effect being kept), asks the idle worker its
// state and leaves it running, unwatched. Where it has no worker, its
// commands do not complete in time or the worker does not answer as it
// should, Keep fails, having closed the VM as Close does (the worker
// ended): the successor attaches it afresh.
func (v *cudaVM) Keep() (backend.Kept, error) {
	w, err := v.shut()
	if err != nil {
		return backend.Kept{}, fmt.Errorf("keeping VM %d: %w", v.id, err)
	}
	k, err := v.keep(w)
	if err != nil {
		v.finish(w)
		return backend.Kept{}, fmt.Errorf("keeping VM %d: %w", v.id, err)
	}
	v.finish(nil) // nothing outstanding; our descriptors go, the kept ones stay
	return k, nil
}

// keep waits until the VM's worker w is idle, detaches it and describes it.
func (v *cudaVM) keep(w *workerConn) (_ backend.Kept, err error) {
	if w == nil || w.dead.Load() {
		return backend.Kept{}, errors.New("it has no GPU worker running")
	}
	if !v.drainWithin(v.b.keepWait) {
		return backend.Kept{}, fmt.Errorf("its commands were still running after %v", v.b.keepWait)
	}
	if w.dead.Load() { // before its pid could be another's
		return backend.Kept{}, fmt.Errorf("its GPU worker ended: %w", w.err)
	}
	pidfd, err := w.p.pidfd()
	if err != nil {
		return backend.Kept{}, err
	}
	defer unix.Close(pidfd)
	st, err := w.query(queryWait)
	if err != nil {
		return backend.Kept{}, err
	}
	v.mu.Lock()
	d := keptData{Protocol: workerProtocol, Tail: v.tail, Buffers: st.Buffers, Modules: st.Modules, MemUsed: st.MemUsed}
	for _, ch := range v.chans {
		d.Seqs = append(d.Seqs, ch.seq)
		d.Ends = append(d.Ends, v.blk.load(ch.base+offEnd))
	}
	v.mu.Unlock()
	if err := st.idleAt(d); err != nil {
		return backend.Kept{}, err
	}
	if d.Heap, d.Syscalls, err = v.fileIDs(); err != nil {
		return backend.Kept{}, err
	}
	data, err := json.Marshal(d)
	if err != nil {
		return backend.Kept{}, err
	}
	// Copies without close-on-exec: the successor inherits them.
	var fds []int
	for _, fd := range [keptFDs]int{keptSock: w.sock, keptShared: v.memfd, keptDoorbell: v.efd, keptPidfd: pidfd} {
		dup, err := unix.Dup(fd)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return backend.Kept{}, fmt.Errorf("passing the GPU worker's descriptors on: %w", err)
		}
		fds = append(fds, dup)
	}
	w.mu.Lock()
	w.closed = true
	_ = unix.Close(w.sock) // the worker sees no end: the kept copy holds it open
	w.mu.Unlock()
	return backend.Kept{Backend: "cuda", FDs: fds, Data: data}, nil
}

// idleAt checks that a worker that answered st is idle at the ring's tail
// and the channels' ends in d.
func (st *workerState) idleAt(d keptData) error {
	if st.Protocol != workerProtocol || st.Busy || st.Head != d.Tail || !slices.Equal(st.Last, d.Ends) {
		return fmt.Errorf("the GPU worker (protocol %d) is not idle where the mediator is: busy %v, ring head %d of %d, channels at %v of %v",
			st.Protocol, st.Busy, st.Head, d.Tail, st.Last, d.Ends)
	}
	return nil
}

// drainWithin waits up to d for every command submitted to be delivered.
func (v *cudaVM) drainWithin(d time.Duration) bool {
	v.b.wakeup()
	t := time.NewTimer(d)
	defer t.Stop()
	for v.undelivered.Load() != 0 {
		select {
		case <-v.drained:
		case <-t.C:
			return v.undelivered.Load() == 0
		}
	}
	return true
}

// query asks the watched worker its state; the answer ends the watch
// (watch), and the worker goes on, unwatched.
func (w *workerConn) query(wait time.Duration) (*workerState, error) {
	w.mu.Lock()
	err := errors.New("its socket is closed")
	if !w.closed {
		n := newNonce()
		w.nonce.Store(n) // before the answer can come: watch matches it
		err = sendMsg(w.sock, message{Kind: msgQuery, Nonce: n})
	}
	w.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("querying the GPU worker: %w", err)
	}
	select {
	case <-w.detached:
		return w.state, nil
	case <-w.exited:
		return nil, fmt.Errorf("the GPU worker ended: %w", w.err)
	case <-time.After(wait):
		return nil, fmt.Errorf("the GPU worker did not answer within %v", wait)
	}
}

// decodeKept decodes and checks a Kept's data for a VM of channels
// channels: everything in it is bounded and consistent before any of it is
// used.
func decodeKept(data []byte, channels int) (keptData, error) {
	var d keptData
	if len(data) > maxMsg {
		return d, fmt.Errorf("%d bytes of data", len(data))
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return d, fmt.Errorf("its data: %w", err)
	}
	if d.Protocol != workerProtocol {
		return d, fmt.Errorf("worker protocol %d, this binary's is %d", d.Protocol, workerProtocol)
	}
	if len(d.Seqs) != channels || len(d.Ends) != channels {
		return d, fmt.Errorf("%d and %d channel positions for %d channels", len(d.Seqs), len(d.Ends), channels)
	}
	for i := range d.Seqs {
		if d.Ends[i] > d.Seqs[i] {
			return d, fmt.Errorf("channel %d ended at %d, past its last command %d", i, d.Ends[i], d.Seqs[i])
		}
	}
	if d.Buffers < 0 || d.Modules < 0 {
		return d, fmt.Errorf("%d buffers and %d modules", d.Buffers, d.Modules)
	}
	return d, nil
}

// adopt takes over the worker a predecessor kept for the VM (spec.Adopt),
// which v's files (keepFiles) are set up for. First the worker is proved
// (adoptProcess): asked over the kept socket, its answer comes from the
// kept pidfd's process. Then every other descriptor is checked for what it
// must be, the data (a hand-over's) for what v is, the shared block for
// where the mediator left it, and the worker's answer for who it is and
// what it holds; a state kept without data (an fd store's, after a crash:
// nobody quiesced the VM) is first settled (settle). Anything off is
// backend.ErrBadKept. A proved worker is then ended (and reaped where it
// is our child); one not proved is never signalled: told to stop on its
// socket, it ends by itself once the kept descriptors close. All of it
// gets adoptWait (Backend.adoptWait), one deadline.
func (v *cudaVM) adopt(spec backend.VMSpec, l blockLayout) (*workerConn, error) {
	a := spec.Adopt
	if a.Backend != "cuda" || len(a.FDs) != keptFDs {
		return nil, fmt.Errorf("%w: backend %q's state, %d descriptors; want the cuda backend's, %d", backend.ErrBadKept, a.Backend, len(a.FDs), keptFDs)
	}
	deadline := time.Now().Add(v.b.adoptWait)
	w, st, err := adoptProcess(a.FDs[keptSock], a.FDs[keptPidfd], deadline)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrBadKept, err)
	}
	d, err := v.adoptWorker(spec, l, w, st, deadline)
	if err != nil {
		_ = sendMsg(w.sock, message{Kind: msgStop})
		w.discard()
		return nil, fmt.Errorf("%w: %w", backend.ErrBadKept, err)
	}
	v.tail = d.Tail
	for i, ch := range v.chans {
		// Its predecessor delivered everything before it kept the worker.
		ch.seq = d.Seqs[i]
		ch.readThrough.Store(ch.seq)
	}
	return w, nil
}

// adoptProcess takes copies of a kept worker's socket and pidfd and proves
// them one GPU worker: asked over the socket, the answer's sender (the
// kernel's credentials, which a process cannot forge) is the pidfd's
// process, there before and after with that pid. Until then the
// descriptors may name anything: on failure nothing is signalled (an
// exited child is reaped, through the pidfd), and the socket, if it is
// one, is told to stop. The worker must answer before deadline.
func adoptProcess(sockFD, pidFD int, deadline time.Time) (*workerConn, *workerState, error) {
	p, err := adoptPidfd(pidFD)
	if err != nil {
		if sock, err := adoptSocket(sockFD); err == nil {
			_ = sendMsg(sock, message{Kind: msgStop})
			unix.Close(sock)
		}
		return nil, nil, fmt.Errorf("the GPU worker's process: %w", err)
	}
	sock, err := adoptSocket(sockFD)
	if err != nil {
		p.release()
		return nil, nil, err
	}
	w := newWorkerConn(p, sock)
	st, err := w.askProved(p, deadline)
	if err != nil {
		_ = sendMsg(sock, message{Kind: msgStop})
		unix.Close(sock)
		p.release()
		return nil, nil, err
	}
	return w, st, nil
}

// askProved asks the worker its state, to be answered before deadline,
// and checks that the answer came from p's process.
func (w *workerConn) askProved(p *pidfdProc, deadline time.Time) (*workerState, error) {
	st, from, err := w.ask(deadline)
	if err != nil {
		return nil, err
	}
	if from != p.pid {
		return nil, fmt.Errorf("the socket's peer is process %d, the pidfd's %d", from, p.pid)
	}
	if err := p.same(); err != nil {
		return nil, fmt.Errorf("the GPU worker's process: %w", err)
	}
	return st, nil
}

// adoptWorker checks the kept data (if any), the files, the shared block
// and the answer st of worker w, proved p's, and returns the data: the
// hand-over's, or, for a state kept without (after a crash), the one
// settle finds by deadline.
func (v *cudaVM) adoptWorker(spec backend.VMSpec, l blockLayout, w *workerConn, st *workerState, deadline time.Time) (keptData, error) {
	a := spec.Adopt
	var d keptData
	if len(a.Data) > 0 {
		var err error
		if d, err = decodeKept(a.Data, spec.Channels); err != nil {
			return d, err
		}
		if err := v.sameFiles(d); err != nil {
			return d, err
		}
	}
	if err := v.adoptBlock(spec, l, a.FDs[keptShared], a.FDs[keptDoorbell]); err != nil {
		return d, err
	}
	if len(a.Data) == 0 {
		var err error
		if d, st, err = v.settle(w, st, deadline); err != nil {
			return d, err
		}
	} else if err := v.blockAt(d); err != nil {
		return d, err
	}
	return d, v.checkState(st, d)
}

// settle waits (until deadline) until a worker kept without data, whose
// mediator crashed, is idle at the ring's tail, and describes it as Keep
// would have. What the crashed mediator left in the shared block decides
// what runs:
//
//   - A ring entry counts from its publication on: its stamp, which
//     Submit stores once the entry is whole and before the tail, and by
//     which the worker takes it. One the mediator had not finished writing
//     has no stamp, never runs, and the next Submit overwrites it; one it
//     stamped but died before storing the tail for is published (the
//     worker may have taken it: its head one past the tail), and the ring
//     goes on past it (block.published).
//   - Every published entry runs, once, in the worker, which goes on
//     without a mediator; their completions (end markers, codes) are
//     nobody's to report, as the mediator that submitted them is gone: the
//     successor's channels resume from what the crashed one published in
//     the region, so a command whose completion it had not published runs
//     again, once, when the channel forwards its record anew (an ALLOC,
//     FREE or LOAD_MODULE among them then fails with abi.ErrBadHandle, its
//     effect being kept, as after a hand-over).
//   - The VM's new commands are numbered on from each channel's last
//     command the worker issued (its end marker, once idle), so an end
//     marker or code of before never completes one of them; the ring goes
//     on from its published end, the request ring claim counter (the
//     worker's) from where the VM's kernels left it.
//
// A worker that does not get idle in time (a kernel that runs on, or one
// that waits for a system call nobody serves yet) is refused: adopting it
// busy would have its old commands end among the new ones.
func (v *cudaVM) settle(w *workerConn, st *workerState, deadline time.Time) (keptData, *workerState, error) {
	// The head read after the stamps: the worker takes no entry the
	// mediator did not stamp, so it is at the published end at most.
	tail := v.blk.published()
	head := v.blk.load(offHead)
	if tail < head || tail-head > v.blk.l.ringCap {
		return keptData{}, nil, fmt.Errorf("the ring's head %d and published end %d (tail %d) are not a ring of %d entries",
			head, tail, v.blk.load(offTail), v.blk.l.ringCap)
	}
	v.blk.store(offTail, tail) // the ring is this mediator's now: Submit goes on from tail
	// A doorbell the mediator died before ringing.
	var one [8]byte
	le.PutUint64(one[:], 1)
	_, _ = unix.Write(v.efd, one[:])
	p := w.p.(*pidfdProc)
	for start := time.Now(); ; {
		if len(st.Last) != len(v.chans) {
			return keptData{}, nil, fmt.Errorf("the GPU worker has %d channels, the VM %d", len(st.Last), len(v.chans))
		}
		d := keptData{Protocol: workerProtocol, Tail: tail, Buffers: st.Buffers, Modules: st.Modules, MemUsed: st.MemUsed}
		for i, ch := range v.chans {
			d.Ends = append(d.Ends, v.blk.load(ch.base+offEnd))
			// Past a start marker a worker before this one left (it died
			// with the command running, and this one issued nothing on
			// the channel since): a new command must not seem started.
			// Within a ring of it: the markers are the VM's to write too.
			seq := st.Last[i]
			if start := v.blk.load(ch.base + offStart); start > seq && start-seq <= v.blk.l.ringCap {
				seq = start
			}
			d.Seqs = append(d.Seqs, seq)
		}
		busy := st.idleAt(d)
		if busy == nil {
			return d, st, nil
		}
		var err error
		if time.Sleep(time.Millisecond); time.Now().Before(deadline) {
			if st, err = w.askProved(p, deadline); err == nil {
				continue
			}
		}
		if time.Now().Before(deadline) {
			return d, nil, err // an answer that does not check out
		}
		return d, nil, fmt.Errorf("after the crash, still running after %v: %w", time.Since(start).Round(time.Millisecond), busy)
	}
}

// sameFiles checks that the heap and the syscall area the worker mapped
// are the files v serves.
func (v *cudaVM) sameFiles(d keptData) error {
	heap, sys, err := v.fileIDs()
	if err != nil {
		return err
	}
	if !sameID(heap, d.Heap) || !sameID(sys, d.Syscalls) {
		return fmt.Errorf("the worker's heap and syscall area are files %v and %v, the VM's %v and %v", d.Heap, d.Syscalls, heap, sys)
	}
	return nil
}

// fileIDs names the VM's heap's and syscall area's files.
func (v *cudaVM) fileIDs() (heap, sys *fileID, err error) {
	if heap, err = idOf(v.heapFD); err == nil {
		sys, err = idOf(v.sysFD)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("naming the heap's and the syscall area's files: %w", err)
	}
	return heap, sys, nil
}

func sameID(a, b *fileID) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// adoptBlock maps the kept shared block (a sealed memfd of the layout's
// size) and takes the doorbell (an eventfd), copies of both.
func (v *cudaVM) adoptBlock(spec backend.VMSpec, l blockLayout, sharedFD, efd int) (err error) {
	if v.memfd, err = unix.FcntlInt(uintptr(sharedFD), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		return fmt.Errorf("the shared block: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(v.memfd, &st); err != nil {
		return fmt.Errorf("the shared block: %w", err)
	}
	const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW
	got, err := unix.FcntlInt(uintptr(v.memfd), unix.F_GET_SEALS, 0)
	if err != nil || got&seals != seals || st.Size != int64(l.size) {
		return fmt.Errorf("the shared block: want a sealed memfd of %d bytes (size %d, seals %#x, %v)", l.size, st.Size, got, err)
	}
	if v.efd, err = unix.FcntlInt(uintptr(efd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		return fmt.Errorf("the doorbell: %w", err)
	}
	if err := isAnon(v.efd, "[eventfd]"); err != nil {
		return fmt.Errorf("the doorbell: %w", err)
	}
	if v.mem, err = shm.Map(v.memfd, l.size); err != nil {
		return fmt.Errorf("mapping the shared block: %w", err)
	}
	v.useBlock(spec, l)
	return nil
}

// blockAt checks that the ring and the channels' end markers are where a
// hand-over's predecessor left them (d).
func (v *cudaVM) blockAt(d keptData) error {
	if head, tail := v.blk.load(offHead), v.blk.load(offTail); head != d.Tail || tail != d.Tail {
		return fmt.Errorf("the ring's head %d and tail %d, not %d", head, tail, d.Tail)
	}
	for i, ch := range v.chans {
		if end := v.blk.load(ch.base + offEnd); end != d.Ends[i] {
			return fmt.Errorf("channel %d's end marker is %d, not %d", i, end, d.Ends[i])
		}
	}
	return nil
}

// checkState checks a kept worker's answer: the worker v would start
// (protocol, device, layout, heap and syscall area), idle where the
// predecessor left it, holding what it held.
func (v *cudaVM) checkState(st *workerState, d keptData) error {
	want, got := v.config().shape(), st.Config.shape()
	heap, sys, err := v.fileIDs()
	if err != nil {
		return err
	}
	switch {
	case got != want:
		return fmt.Errorf("the GPU worker runs %+v, the VM needs %+v", got, want)
	case st.Device != v.b.name:
		return fmt.Errorf("the GPU worker runs on %q, this backend on %q", st.Device, v.b.name)
	case !sameID(st.Heap, heap) || !sameID(st.Syscalls, sys):
		return fmt.Errorf("the GPU worker mapped files %v and %v as its heap and syscall area, the VM's are %v and %v", st.Heap, st.Syscalls, heap, sys)
	case st.Buffers != d.Buffers || st.Modules != d.Modules || st.MemUsed != d.MemUsed || v.blk.load(offMemUsed) != d.MemUsed:
		return fmt.Errorf("the GPU worker holds %d buffers (%d bytes, %d in the block) and %d modules; it was kept with %d (%d bytes) and %d",
			st.Buffers, st.MemUsed, v.blk.load(offMemUsed), st.Modules, d.Buffers, d.MemUsed, d.Modules)
	}
	return st.idleAt(d)
}

// shape is c without what may differ between a worker and the one its
// successor would start (names and the options that only tune it): what
// a kept worker must share with the VM that adopts it.
func (c workerConfig) shape() workerConfig {
	// The VM's id too: a daemon started after a crash numbers its VMs
	// anew (the worker only names itself by it); the VM is the one the
	// kept state was found under, and its files are checked by inode.
	c.VM, c.Name, c.Library, c.GapNs, c.StallNs, c.SpinNs, c.RingBase = 0, "", "", 0, 0, 0, 0
	return c
}

// adoptSocket takes a copy of the kept socket, which must be a
// SOCK_SEQPACKET socket of the UNIX domain.
func adoptSocket(fd int) (int, error) {
	sock, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("the GPU worker's socket: %w", err)
	}
	typ, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE)
	dom := -1
	if err == nil {
		dom, err = unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_DOMAIN)
	}
	if err != nil || typ != unix.SOCK_SEQPACKET || dom != unix.AF_UNIX {
		unix.Close(sock)
		return -1, fmt.Errorf("the GPU worker's socket: want a UNIX seqpacket socket (type %d, domain %d, %v)", typ, dom, err)
	}
	return sock, nil
}

// ask is query for a worker nobody watches: it reads the answer itself,
// with the kernel's credentials of its sender, and returns the sender's
// pid with it. The answer must come before deadline and carry the
// query's nonce: an answer to another query (one that timed out, in a
// predecessor) is passed over, as it may describe the worker as it was.
// An answer without the nonce, from a worker of another protocol (which
// does not echo it), fails at once.
func (w *workerConn) ask(deadline time.Time) (*workerState, int, error) {
	if err := unix.SetsockoptInt(w.sock, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return nil, 0, fmt.Errorf("asking for the GPU worker's credentials: %w", err)
	}
	defer unix.SetsockoptInt(w.sock, unix.SOL_SOCKET, unix.SO_PASSCRED, 0)
	nonce := newNonce()
	if err := sendMsg(w.sock, message{Kind: msgQuery, Nonce: nonce}); err != nil {
		return nil, 0, fmt.Errorf("querying the GPU worker: %w", err)
	}
	fds := []unix.PollFd{{Fd: int32(w.sock), Events: unix.POLLIN}}
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, 0, errors.New("the GPU worker did not answer in the adoption's time")
		}
		if n, err := unix.Poll(fds, int(left.Milliseconds())+1); err == unix.EINTR || err == nil && n == 0 {
			continue
		} else if err != nil {
			return nil, 0, fmt.Errorf("waiting for the GPU worker: %w", err)
		}
		m, pid, err := readMsgFrom(w.sock)
		switch {
		case err != nil:
			return nil, 0, fmt.Errorf("the GPU worker's answer: %w", err)
		case m.Kind != msgState || m.State == nil:
			return nil, 0, fmt.Errorf("the GPU worker said %q (%s), not its state", m.Kind, m.Error)
		case m.State.Protocol != workerProtocol:
			return nil, 0, fmt.Errorf("the GPU worker speaks protocol %d, this binary %d", m.State.Protocol, workerProtocol)
		case m.Nonce != nonce:
			continue // another query's
		}
		return m.State, pid, nil
	}
}

// newNonce is a query's nonce: random, as a predecessor's queries must
// not share it, and never 0 (none).
func newNonce() uint64 {
	return rand.Uint64() | 1
}
