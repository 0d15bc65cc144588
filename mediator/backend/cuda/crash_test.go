package cuda

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// A crash of the mediator, as kill -9 makes it: this test binary as
// crashPredecessorCommand attaches a VM whose worker is a process, with a
// store (the test's stand-in for the service manager's fd store, over a
// socket: crashStoreFD), runs commands, leaves some in flight, one
// published in the ring but not its tail, and one half written, says so
// and waits to be killed. The test
// kills it and adopts the worker, now an orphan, from the store, as
// sluiced started again after a crash does.
const (
	crashPredecessorCommand = "cuda-crash-predecessor"
	crashScenarioEnv        = "SLUICE_TEST_CUDA_CRASH"
	crashStoreFD            = 3 // the store's socket in the predecessor
	crashHeapFD             = 4 // the heap's memfd in the predecessor
	crashReady              = "crash-ready"
)

// crashScenario is what the predecessor runs and the successor checks.
type crashScenario struct {
	gpu      bool // a real GPU's worker, else the fake driver's
	heapSize int
	fill     func(heap []byte)
	before   []abi.Command // on channel 0, completed before the crash
	inFlight []abi.Command // submitted just before it
	unTailed abi.Command   // written into the ring and stamped, but the tail not stored
	halfDone abi.Command   // written into the ring but not published
	after    []abi.Command // on channel 0 in the successor
	want     []abi.ErrorCode
	check    func(heap []byte) error
}

// hang is a fake kernel whose stream never gets past it.
const (
	kHangModule = 12288
	kHangName   = 12800
	hangPTX     = ".entry hang(\n)"
)

var kAllocNew = abi.Command{Op: abi.OpAlloc, Handle: 9, Size: kSize}

func fakeCrash() crashScenario {
	return crashScenario{
		heapSize: execHeapSize,
		fill:     fillKeepHeap,
		before:   []abi.Command{kAlloc, kFill, kLoad},
		// Ran in the worker after the crash, unreported: a handle it took.
		inFlight: []abi.Command{{Op: abi.OpAlloc, Handle: 4, Size: kSize}, {Op: abi.OpThrottle, DurationNs: 1000}},
		unTailed: abi.Command{Op: abi.OpAlloc, Handle: 6, Size: kSize},
		halfDone: kAllocNew,
		// The buffer and the module are there; handles 4 and 6 are
		// taken (their ALLOCs ran once, the one stamped without a tail
		// too); handle 9 is not (its ALLOC was never published).
		after: []abi.Command{kReadBack, kLaunch, {Op: abi.OpAlloc, Handle: 4, Size: kSize}, {Op: abi.OpAlloc, Handle: 6, Size: kSize},
			kAllocNew, {Op: abi.OpFree, Handle: 9}},
		want: []abi.ErrorCode{abi.OK, abi.OK, abi.ErrBadHandle, abi.ErrBadHandle, abi.OK, abi.OK},
		check: func(heap []byte) error {
			if !bytes.Equal(heap[kBack:kBack+kSize], heap[kData:kData+kSize]) {
				return errors.New("the buffer read back after the crash differs from what was written before it")
			}
			return nil
		},
	}
}

// hangCrash leaves a command running that never ends.
func hangCrash() crashScenario {
	s := fakeCrash()
	s.fill = func(heap []byte) {
		fillKeepHeap(heap)
		copy(heap[kHangModule:], hangPTX)
		copy(heap[kHangName:], "hang")
	}
	s.before = append(s.before, abi.Command{Op: abi.OpLoadModule, Handle: 8, Format: abi.ModulePTX, HeapOff: kHangModule, Length: uint64(len(hangPTX))})
	s.inFlight = []abi.Command{{Op: abi.OpLaunch, Handle: 8, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, NameOff: kHangName, NameLen: 4}}
	return s
}

// gpuCrash is fakeCrash on a GPU: add_one's module, a buffer of the
// heap's input, a 50 ms THROTTLE in flight at the crash.
func gpuCrash() crashScenario {
	load, launch := launchCmds(make([]byte, 1<<20), "add_one", true)
	in := abi.Command{Op: abi.OpAlloc, Handle: 5, Size: 4 * nElems}
	const back = 98304
	return crashScenario{
		gpu:      true,
		heapSize: 1 << 20,
		fill: func(heap []byte) {
			launchCmds(heap, "add_one", true)
			for i := range nElems {
				le.PutUint32(heap[hIn+4*i:], uint32(i*5))
			}
		},
		before:   []abi.Command{in, {Op: abi.OpCopy, Handle: 5, Dir: abi.CopyHostToDevice, HeapOff: hIn, Length: 4 * nElems}, load},
		inFlight: []abi.Command{{Op: abi.OpThrottle, DurationNs: 50_000_000}, {Op: abi.OpAlloc, Handle: 4, Size: 4096}},
		unTailed: abi.Command{Op: abi.OpAlloc, Handle: 6, Size: 4096},
		halfDone: abi.Command{Op: abi.OpAlloc, Handle: 9, Size: 4096},
		after: []abi.Command{{Op: abi.OpCopy, Handle: 5, Dir: abi.CopyDeviceToHost, HeapOff: back, Length: 4 * nElems}, launch,
			{Op: abi.OpAlloc, Handle: 4, Size: 4096}, {Op: abi.OpAlloc, Handle: 6, Size: 4096}, {Op: abi.OpAlloc, Handle: 9, Size: 4096}},
		want: []abi.ErrorCode{abi.OK, abi.OK, abi.ErrBadHandle, abi.ErrBadHandle, abi.OK},
		check: func(heap []byte) error {
			for i := range nElems {
				if got := le.Uint32(heap[back+4*i:]); got != uint32(i*5) {
					return fmt.Errorf("the buffer read back after the crash: [%d] = %d, want %d", i, got, i*5)
				}
				if got := le.Uint32(heap[hOut+4*i:]); got != uint32(i*5+1) {
					return fmt.Errorf("out[%d] = %d, want %d: the kept kernel did not run on the kept buffer", i, got, i*5+1)
				}
			}
			return nil
		},
	}
}

var crashScenarios = map[string]func() crashScenario{"fake": fakeCrash, "hang": hangCrash, "gpu": gpuCrash}

func (s crashScenario) backend() (*Backend, error) {
	if s.gpu {
		params := map[string]string{}
		if lib := os.Getenv("SLUICE_LIBCUDA"); lib != "" {
			params["library"] = lib
		}
		be, err := Open(backend.Options{Params: params})
		if err != nil {
			return nil, err
		}
		return be.(*Backend), nil
	}
	return execBackend()
}

func crashSpec(heap []byte, fd int, store backend.DeviceStore, done chan backend.Completion) backend.VMSpec {
	return backend.VMSpec{ID: 1, Name: "crash", Channels: 2, Heap: heap, HeapFile: &backend.FileRange{FD: fd}, MaxInFlight: 64,
		Store: store, Complete: func(c backend.Completion) { done <- c }}
}

// crashPredecessor is the predecessor's main.
func crashPredecessor() error {
	s, ok := crashScenarios[os.Getenv(crashScenarioEnv)]
	if !ok {
		return fmt.Errorf("no scenario %q", os.Getenv(crashScenarioEnv))
	}
	sc := s()
	unix.CloseOnExec(crashStoreFD)
	unix.CloseOnExec(crashHeapFD)
	b, err := sc.backend()
	if err != nil {
		return err
	}
	heap, err := shm.Map(crashHeapFD, sc.heapSize)
	if err != nil {
		return err
	}
	done := make(chan backend.Completion, 64)
	be, err := b.Attach(crashSpec(heap, crashHeapFD, sockStore(crashStoreFD), done))
	if err != nil {
		return err
	}
	v := be.(*cudaVM)
	got, err := runCommands(v, done, sc.before...)
	if err != nil {
		return err
	}
	for i, c := range got {
		if c != abi.OK {
			return fmt.Errorf("before the crash, command %d (%v): %v", i, sc.before[i].Op, c)
		}
	}
	for i, c := range sc.inFlight {
		if err := v.Submit(0, c, uint64(100+i)); err != nil {
			return err
		}
	}
	v.mu.Lock()
	// An entry written and stamped as Submit does, but the tail never
	// stored: the mediator died between the two. The worker takes it.
	ch := v.chans[0]
	ch.seq++
	writeEntry(v.blk, v.tail, 0, ch.seq, sc.unTailed)
	v.blk.store(v.blk.entryOff(v.tail)+entryStamp, v.tail+1)
	// One written but not stamped: the mediator died while writing it.
	writeEntry(v.blk, v.tail+1, 0, ch.seq+1, sc.halfDone)
	v.mu.Unlock()
	fmt.Println(crashReady)
	select {} // until killed
}

// writeEntry writes cmd into ring position i as putEntry does, without
// its stamp or the tail.
func writeEntry(blk block, i uint64, channel int, seq uint64, cmd abi.Command) {
	e := blk.entry(i)
	le.PutUint32(e[entryChannel:], uint32(channel))
	le.PutUint64(e[entrySeq:], seq)
	rec := abi.EncodeCommand(cmd)
	copy(e[entryRecord:], rec[:])
}

// sockStore is the predecessor's store: each descriptor goes to the test
// over a socket, as sd_notify's FDSTORE=1 goes to systemd.
type sockStore int

func (s sockStore) StoreKept(k backend.Kept) error {
	for i, fd := range k.FDs {
		if err := unix.Sendmsg(int(s), []byte("store "+k.Backend+"/"+strconv.Itoa(i)), unix.UnixRights(fd), nil, 0); err != nil {
			return err
		}
	}
	return nil
}

func (s sockStore) RemoveKept(k backend.Kept) error {
	for i := range k.FDs {
		if err := unix.Sendmsg(int(s), []byte("remove "+k.Backend+"/"+strconv.Itoa(i)), nil, nil, 0); err != nil {
			return err
		}
	}
	return nil
}

// fdStore stands in for the service manager's fd store: descriptors by
// name, kept open until removed.
type fdStore struct {
	mu  sync.Mutex
	fds map[string]int
}

func newFDStore(t *testing.T) *fdStore {
	s := &fdStore{fds: map[string]int{}}
	t.Cleanup(s.empty)
	return s
}

func (s *fdStore) put(name string, fd int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.fds[name]; ok {
		unix.Close(old)
	}
	s.fds[name] = fd
}

func (s *fdStore) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fd, ok := s.fds[name]; ok {
		unix.Close(fd)
		delete(s.fds, name)
	}
}

// empty closes everything stored, as systemctl stop does.
func (s *fdStore) empty() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, fd := range s.fds {
		unix.Close(fd)
		delete(s.fds, name)
	}
}

func (s *fdStore) StoreKept(k backend.Kept) error {
	for i, fd := range k.FDs {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.put(k.Backend+"/"+strconv.Itoa(i), dup)
	}
	return nil
}

func (s *fdStore) RemoveKept(k backend.Kept) error {
	for i := range k.FDs {
		s.remove(k.Backend + "/" + strconv.Itoa(i))
	}
	return nil
}

// kept is the cuda state stored, as the daemon's FromStore finds it: no
// data; nil if it is not whole.
func (s *fdStore) kept() *backend.Kept {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := &backend.Kept{Backend: "cuda"}
	for i := range keptFDs {
		fd, ok := s.fds["cuda/"+strconv.Itoa(i)]
		if !ok {
			return nil
		}
		k.FDs = append(k.FDs, fd)
	}
	return k
}

// serve applies the predecessor's messages until its end of sock closes.
func (s *fdStore) serve(sock int) {
	buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		verb, name, _ := strings.Cut(string(buf[:n]), " ")
		switch verb {
		case "store":
			cmsgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for i := range cmsgs {
				if fds, err := unix.ParseUnixRights(&cmsgs[i]); err == nil && len(fds) == 1 {
					s.put(name, fds[0])
				}
			}
		case "remove":
			s.remove(name)
		}
	}
}

// crashed runs the predecessor with scenario name, kills it once it is
// ready and returns the store it left, the worker's state in it and a copy
// of its pidfd, and the heap.
func crashed(t *testing.T, name string) (*fdStore, *backend.Kept, int, gpuHeap, crashScenario) {
	t.Helper()
	sc := crashScenarios[name]()
	heap := mapHeap(t, sc.heapSize)
	sc.fill(heap.mem)
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	store := newFDStore(t)
	served := make(chan struct{})
	go func() { defer close(served); store.serve(sp[0]) }()
	cmd := exec.Command("/proc/self/exe", crashPredecessorCommand)
	cmd.Env = append(os.Environ(), crashScenarioEnv+"="+name)
	heapFD, err := unix.FcntlInt(uintptr(heap.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(sp[1]), "store"), os.NewFile(uintptr(heapFD), "heap")}
	cmd.Stderr = os.Stderr // the worker's too: no pipe that outlives the predecessor
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != crashReady {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the predecessor said %q (%v)", line, err)
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	unix.Close(sp[0])
	<-served
	k := store.kept()
	if k == nil {
		t.Fatalf("the worker is not in the store: %v", store.fds)
	}
	return store, k, keptPidfdCopy(t, k), heap, sc
}

// exited reports whether the process of pidfd fd ended within d.
func exited(fd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); ; {
		n, err := unix.Poll(fds, 10)
		if err == nil && n > 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// keptPidfdCopy is a copy of the stored worker's pidfd.
func keptPidfdCopy(t *testing.T, k *backend.Kept) int {
	t.Helper()
	fd, err := unix.FcntlInt(uintptr(k.FDs[keptPidfd]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// adoptCrashed is the successor's side: the worker outlived the crash in
// the store and b adopts it.
func adoptCrashed(t *testing.T, b *Backend, name string) {
	store, k, pidfd, heap, sc := crashed(t, name)
	pid, err := pidOf(pidfd)
	if err != nil || exited(pidfd, 0) {
		t.Fatalf("the worker did not outlive the mediator's crash: %v", err)
	}
	t.Logf("worker %d outlived the crash (a child of this process: %v)", pid, isChild(pid) == nil)
	done := make(chan backend.Completion, 64)
	own := newFDStore(t)
	spec := crashSpec(heap.mem, heap.fd, own, done)
	spec.Adopt = k
	start := time.Now()
	be, err := b.Attach(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("adopted after the crash in %v", time.Since(start))
	store.empty() // as the daemon does once adopted: the backend stored it again
	v := be.(*cudaVM)
	got, err := runCommands(v, done, sc.after...)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(sc.want) {
		t.Fatalf("after the adoption: %v, %v; want %v", got, err, sc.want)
	}
	if err := sc.check(heap.mem); err != nil {
		t.Fatal(err)
	}
	if k := own.kept(); k == nil || v.Restarts() != 0 || v.Fault() != nil {
		t.Fatalf("adopted worker stored %v, restarts %d, fault %v", k != nil, v.Restarts(), v.Fault())
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if !exited(pidfd, 10*time.Second) {
		t.Fatal("the adopted worker did not end with its VM")
	}
	if own.kept() != nil {
		t.Fatal("the ended worker stays in the store")
	}
}

func TestCrashAdoptFromStore(t *testing.T) {
	adoptCrashed(t, procBackend(t), "fake")
}

// TestCrashStoreEmptied: a worker whose store is emptied (systemctl
// stop) after the mediator crashed sees its socket close and ends.
func TestCrashStoreEmptied(t *testing.T) {
	store, _, pidfd, _, _ := crashed(t, "fake")
	if exited(pidfd, 100*time.Millisecond) {
		t.Fatal("the worker ended with the mediator, its socket in the store")
	}
	store.empty()
	if !exited(pidfd, 10*time.Second) {
		t.Fatal("the worker did not end when the store closed its socket")
	}
}

// TestCrashAdoptRefusesABusyWorker: a worker still running a command
// adoptWait after the crash is refused, and ended, being proved the
// VM's; the VM then starts afresh.
func TestCrashAdoptRefusesABusyWorker(t *testing.T) {
	store, k, pidfd, heap, _ := crashed(t, "hang")
	b := procBackend(t)
	b.adoptWait = 200 * time.Millisecond
	done := make(chan backend.Completion, 64)
	spec := crashSpec(heap.mem, heap.fd, nil, done)
	spec.Adopt = k
	_, err := b.Attach(spec)
	if !errors.Is(err, backend.ErrBadKept) || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("adopting a busy worker: %v, want ErrBadKept, still running", err)
	}
	t.Logf("as expected: %v", err)
	if !exited(pidfd, 10*time.Second) {
		t.Fatal("the refused worker was not ended")
	}
	store.empty()
	freshAfterRefusal(t, b, spec)
}

// brokenStore stores the first descriptors of a state and then fails, as
// an fd store that fills up does.
type brokenStore struct {
	*fdStore
	keep int // descriptors it stores before failing
}

func (s brokenStore) StoreKept(k backend.Kept) error {
	if err := s.fdStore.StoreKept(backend.Kept{Backend: k.Backend, FDs: k.FDs[:s.keep]}); err != nil {
		return err
	}
	return errors.New("the store is full")
}

// TestStoreWorkerFailsWhole: a worker whose descriptors the store takes
// only in part is taken out of it whole; the VM runs on, unstored.
func TestStoreWorkerFailsWhole(t *testing.T) {
	b := procBackend(t)
	heap := mapHeap(t, execHeapSize)
	store := newFDStore(t)
	done := make(chan backend.Completion, 8)
	vm, err := b.Attach(crashSpec(heap.mem, heap.fd, brokenStore{store, 2}, done))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	store.mu.Lock()
	left := len(store.fds)
	store.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d descriptors of the worker stay stored after the store failed", left)
	}
	if got, err := runCommands(vm, done, abi.Command{Op: abi.OpFence, Value: 1}); err != nil || got[0] != abi.OK {
		t.Fatalf("the VM after its worker was not stored: %v, %v", got, err)
	}
}
