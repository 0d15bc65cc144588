package cuda

import (
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A GPU worker is this very binary, started again with WorkerCommand as
// its first argument: the binary's command line (cudacmd's hidden
// subcommand, or a test's TestMain through Dispatch) calls WorkerMain. Its
// descriptors: the socket (3), the shared block (4), the doorbell eventfd
// (5), for a VM with a heap the heap's file (6) and, for a VM with a
// syscall area, the area's file (7). A descriptor a VM lacks is closed in
// the worker: the others keep their numbers.
const (
	fdSock     = 3
	fdShared   = 4
	fdDoorbell = 5
	fdHeap     = 6
	fdSyscall  = 7
)

// The subcommands a binary that links this backend answers to, which the
// backend starts it again with: its GPU workers and the native runner.
const (
	WorkerCommand = "cuda-worker"
	NativeCommand = "cuda-native"
)

// Dispatch runs the role args names, for a binary (a test binary's
// TestMain) without cudacmd's subcommands: with args[0] WorkerCommand or
// NativeCommand, it runs that role and returns its exit status and true;
// otherwise 0 and false.
func Dispatch(args []string) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case WorkerCommand:
		return WorkerMain(), true
	case NativeCommand:
		return NativeMain(), true
	}
	return 0, false
}

// MainOr is a test binary's main: the role os.Args names (Dispatch), else
// run (m.Run). Use: func TestMain(m *testing.M) { os.Exit(cuda.MainOr(m.Run)) }
func MainOr(run func() int) int {
	if code, ok := Dispatch(os.Args[1:]); ok {
		return code
	}
	return run()
}

// Messages on a worker's socket (SOCK_SEQPACKET, one JSON object each).
const (
	msgConfig = "config" // mediator → worker, first: Config
	msgReady  = "ready"  // worker → mediator: the context is made; Device
	msgError  = "error"  // worker → mediator: it could not start; Error, Result
	msgFault  = "fault"  // worker → mediator: its context faulted; Error, Result
	msgStop   = "stop"   // mediator → worker: end now
	msgQuery  = "query"  // mediator → worker: describe yourself (keep.go); Nonce
	msgState  = "state"  // worker → mediator, the answer to a query: State, the query's Nonce
)

type message struct {
	Kind   string        `json:"kind"`
	Config *workerConfig `json:"config,omitempty"`
	Device string        `json:"device,omitempty"`
	Error  string        `json:"error,omitempty"`
	Result int32         `json:"result,omitempty"` // the CUresult behind Error
	// Clock is the GPU clock's relation to the host's, in a ready
	// message of a worker that runs the hop diagnostic.
	Clock *GPUClock `json:"clock,omitempty"`
	// State is a worker's answer to a query, which carries the query's
	// Nonce (set by the mediator, echoed by the worker): an answer to
	// another query never passes for it.
	State *workerState `json:"state,omitempty"`
	Nonce uint64       `json:"nonce,omitempty"`
}

func errorMsg(kind string, err error) message {
	return message{Kind: kind, Error: err.Error(), Result: int32(resultOf(err))}
}

// remoteError is an error a worker reported, with its CUresult.
type remoteError struct {
	msg string
	r   cuResult
}

func (e remoteError) Error() string { return e.msg }

func (e remoteError) Unwrap() error {
	if e.r == 0 {
		return nil
	}
	return e.r
}

func (m message) err() error { return remoteError{msg: m.Error, r: cuResult(m.Result)} }

// maxMsg bounds a message: a config or an error text.
const maxMsg = 64 << 10

func sendMsg(fd int, m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	for {
		if _, err = unix.Write(fd, b); err != unix.EINTR {
			return err
		}
	}
}

// readMsg reads one message; io.EOF when the other end closed.
func readMsg(fd int) (message, error) {
	m, _, err := recvMsg(fd, nil)
	return m, err
}

// readMsgFrom reads one message on a socket with SO_PASSCRED set, and the
// pid of the process that sent it, as the kernel attached it.
func readMsgFrom(fd int) (message, int, error) {
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	m, oob, err := recvMsg(fd, oob)
	if err != nil {
		return m, 0, err
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return m, 0, fmt.Errorf("the message's credentials: %w", err)
	}
	for i := range cmsgs {
		if c, err := unix.ParseUnixCredentials(&cmsgs[i]); err == nil && c.Pid > 0 {
			return m, int(c.Pid), nil
		}
	}
	return m, 0, errors.New("a message without its sender's credentials")
}

// recvMsg reads one message and its ancillary data into oob (nil: none),
// returning what of oob was filled.
func recvMsg(fd int, oob []byte) (message, []byte, error) {
	b := make([]byte, maxMsg)
	for {
		var n, oobn int
		var err error
		if oob == nil {
			// read(2) through x/sys, which tells the race detector that
			// what the writer did before its write happened before this.
			n, err = unix.Read(fd, b)
		} else {
			n, oobn, _, _, err = unix.Recvmsg(fd, b, oob, 0)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return message{}, nil, err
		case n == 0:
			return message{}, nil, io.EOF
		}
		var m message
		if err := json.Unmarshal(b[:n], &m); err != nil {
			return message{}, nil, fmt.Errorf("a malformed message: %w", err)
		}
		return m, oob[:oobn], nil
	}
}

// workerFiles are what a worker is started with. The spawner owns sock
// (the worker's end) from then on; shared, heap and syscall area are the
// mediator's mappings (for a worker in this process) and files.
type workerFiles struct {
	sock, efd, sharedFD     int
	heapFD                  int // -1 without a heap
	sysFD                   int // -1 without a syscall area
	shared, heapMem, sysMem []byte
}

// proc is a running worker.
type proc interface {
	kill()       // end it now
	wait() error // its end
	// pidfd is a new descriptor of the worker process (close-on-exec),
	// for a successor to adopt it by (keep.go); an error for a worker
	// that is not a process of its own.
	pidfd() (int, error)
}

// spawner starts a worker.
type spawner func(cfg workerConfig, f workerFiles) (proc, error)

// spawnProcess starts a worker as a child process of this binary.
func spawnProcess(cfg workerConfig, f workerFiles) (proc, error) {
	return spawnRole(WorkerCommand, cfg, f)
}

// spawnAs is a spawner that starts this binary as role (the tests' worker
// on their fake driver).
func spawnAs(role string) spawner {
	return func(cfg workerConfig, f workerFiles) (proc, error) { return spawnRole(role, cfg, f) }
}

// spawnRole starts a worker as a child process of this binary, with role
// as its first argument.
func spawnRole(role string, cfg workerConfig, f workerFiles) (proc, error) {
	defer unix.Close(f.sock)
	// The child gets copies: the caller keeps its descriptors.
	// A nil entry (a descriptor the VM lacks) is closed in the child, so
	// that the ones after it keep their numbers.
	var extra []*os.File
	defer func() {
		for _, fl := range extra {
			if fl != nil {
				_ = fl.Close()
			}
		}
	}()
	for _, fd := range []int{f.sock, f.sharedFD, f.efd, f.heapFD, f.sysFD} {
		if fd < 0 {
			extra = append(extra, nil)
			continue
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("passing descriptors to a GPU worker: %w", err)
		}
		extra = append(extra, os.NewFile(uintptr(dup), "worker-fd"))
	}
	cmd := &exec.Cmd{
		// This very binary, even if its file was replaced or removed since
		// it started: worker and mediator speak the same protocol.
		Path:       "/proc/self/exe",
		Args:       []string{fmt.Sprintf("sluice-gpu-worker [vm %d %s]", cfg.VM, cfg.Name), role},
		ExtraFiles: extra,
		Stdout:     os.Stderr,
		Stderr:     os.Stderr,
		// No Pdeathsig: it follows the thread that forked, not the process.
		// The worker ends when its socket closes, with the mediator.
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a GPU worker: %w", err)
	}
	return &childProc{cmd: cmd}, nil
}

type childProc struct{ cmd *exec.Cmd }

func (p *childProc) kill()       { _ = p.cmd.Process.Kill() }
func (p *childProc) wait() error { return p.cmd.Wait() }

func (p *childProc) pidfd() (int, error) {
	fd, err := unix.PidfdOpen(p.cmd.Process.Pid, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the GPU worker's pidfd: %w", err)
	}
	return fd, nil
}

// WorkerMain is a GPU worker process's main, which the binary runs for
// WorkerCommand: it maps what it was given on its descriptors, loads the
// driver and serves until told to stop, its socket closes or its context
// faults. Its exit status says which: 0 stopped, 1 could not start or lost
// the mediator, 3 faulted.
func WorkerMain() int {
	return workerMain(func(lib string) (driver, error) {
		l, err := loadLibcuda(lib)
		if err != nil {
			return nil, err
		}
		return l, nil
	})
}

// workerMain is WorkerMain on the driver load gives for the configured
// library (the tests' worker processes run on their fake driver).
func workerMain(load func(library string) (driver, error)) int {
	runtime.LockOSThread()
	m, err := readMsg(fdSock)
	if err != nil || m.Kind != msgConfig || m.Config == nil {
		fmt.Fprintf(os.Stderr, "sluice-gpu-worker: no configuration from the mediator: %v\n", err)
		return 1
	}
	cfg := *m.Config
	fail := func(err error) int {
		_ = sendMsg(fdSock, errorMsg(msgError, err))
		return 1
	}
	shared, err := mapAnywhere(fdShared, cfg.SharedSize)
	if err != nil {
		return fail(fmt.Errorf("mapping the shared block: %w", err))
	}
	var heap []byte
	if cfg.HeapSize > 0 {
		if heap, err = mapRange(fdHeap, cfg.HeapOff, int(cfg.HeapSize)); err != nil {
			return fail(fmt.Errorf("mapping the heap: %w", err))
		}
	}
	var sys []byte
	if cfg.SyscallSize > 0 {
		if cfg.SyscallOff%int64(os.Getpagesize()) != 0 {
			return fail(fmt.Errorf("the syscall area's offset %d in its file is not page aligned", cfg.SyscallOff))
		}
		if sys, err = mapRange(fdSyscall, cfg.SyscallOff, int(cfg.SyscallSize)); err != nil {
			return fail(fmt.Errorf("mapping the syscall area: %w", err))
		}
	}
	var files [2]*fileID
	for i, fd := range [2]int{fdHeap, fdSyscall} {
		if [2]uint64{cfg.HeapSize, cfg.SyscallSize}[i] > 0 {
			if files[i], err = idOf(fd); err != nil {
				return fail(fmt.Errorf("naming the heap's and the syscall area's files: %w", err))
			}
		}
	}
	lib, err := load(cfg.Library)
	if err != nil {
		return fail(err)
	}
	w := newWorker(lib, cfg, shared, heap, fdSock, fdDoorbell).withSyscalls(sys)
	w.files = files
	err = w.serve()
	var f faultError
	switch {
	case errors.Is(err, errWorkerStop): // serve ends only with an error
		return 0
	case errors.As(err, &f):
		fmt.Fprintf(os.Stderr, "sluice-gpu-worker [vm %d %s]: the context faulted: %v\n", cfg.VM, cfg.Name, err)
		return 3
	}
	fmt.Fprintf(os.Stderr, "sluice-gpu-worker [vm %d %s]: %v\n", cfg.VM, cfg.Name, err)
	return 1
}

// mapAnywhere maps size bytes of fd at a random address. The shared block's
// GPU area's device address is its host address (unified addressing): far
// from the heap, whose address the VM learns from its relocations, a kernel
// of the VM that goes looking for its markers faults first, and each fault
// costs it its worker and a restart delay.
func mapAnywhere(fd, size int) ([]byte, error) {
	var r [8]byte
	_, _ = crand.Read(r[:])
	hint := uintptr(1<<40+le.Uint64(r[:])%(1<<45)) &^ 0xffff
	addr, _, errno := unix.Syscall6(unix.SYS_MMAP, hint, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED, uintptr(fd), 0)
	if errno != 0 {
		return nil, errno
	}
	// A mapping outside the Go heap, never unmapped while the worker runs.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), size), nil
}

// mapRange maps n bytes of fd from off, which need not be page aligned.
func mapRange(fd int, off int64, n int) ([]byte, error) {
	skip := off % int64(os.Getpagesize())
	b, err := unix.Mmap(fd, off-skip, n+int(skip), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return b[skip : skip+int64(n)], nil
}
