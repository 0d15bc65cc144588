package cuda

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// A hand-over as sluiced makes it, in a process of its own: this test
// binary as predecessorCommand attaches a VM (its worker a process on the
// fake driver), fills a buffer, keeps the VM and execs itself as
// successorCommand, which adopts the worker and checks it.
const (
	predecessorCommand = "cuda-keep-predecessor"
	successorCommand   = "cuda-keep-successor"
	handoverEnv        = "SLUICE_TEST_CUDA_HANDOVER"
)

// execHandover is what the predecessor passes on (in handoverEnv).
type execHandover struct {
	Kept backend.Kept `json:"kept"`
	Heap int          `json:"heap"` // the heap's memfd
	Pid  int          `json:"pid"`  // the worker's
}

const execHeapSize = 32 << 10

// runHandoverRole runs the role args names, if any.
func runHandoverRole(args []string) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	var err error
	switch args[0] {
	case predecessorCommand:
		err = predecessor()
	case successorCommand:
		err = successor()
	case crashPredecessorCommand:
		err = crashPredecessor()
	default:
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", args[0], err)
		return 1, true
	}
	return 0, true
}

// fillKeepHeap lays keep_test.go's module, kernel arguments and data out
// in heap.
func fillKeepHeap(heap []byte) {
	copy(heap[kModule:], keepPTX)
	copy(heap[kName:], "scale")
	le.PutUint64(heap[kArgs:], 3)   // buffer handle 3
	le.PutUint32(heap[kArgs+8:], 0) // at argument offset 0
	le.PutUint32(heap[kArgs+12:], abi.RelocBuffer)
	for i := range kSize {
		heap[kData+i] = byte(i*7 + 1)
	}
}

// runCommands submits cmds on channel 0 and returns their codes.
func runCommands(v backend.VM, done chan backend.Completion, cmds ...abi.Command) ([]abi.ErrorCode, error) {
	for i, c := range cmds {
		if err := v.Submit(0, c, uint64(i)); err != nil {
			return nil, err
		}
	}
	var out []abi.ErrorCode
	for range cmds {
		select {
		case c := <-done:
			out = append(out, c.Code)
		case <-time.After(10 * time.Second):
			return out, errors.New("no completion for 10s")
		}
	}
	return out, nil
}

func execBackend() (*Backend, error) {
	b, err := open(newFake(), backend.Options{}, spawnAs(fakeWorkerCommand))
	if err == nil {
		b.needFiles = true
	}
	return b, err
}

func execSpec(heap []byte, fd int, done chan backend.Completion) backend.VMSpec {
	return backend.VMSpec{ID: 1, Name: "exec", Channels: 2, Heap: heap, HeapFile: &backend.FileRange{FD: fd},
		Complete: func(c backend.Completion) { done <- c }}
}

func predecessor() error {
	b, err := execBackend()
	if err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("heap", 0) // inherited by the successor, as sluiced's region
	if err != nil {
		return err
	}
	if err := unix.Ftruncate(fd, execHeapSize); err != nil {
		return err
	}
	heap, err := shm.Map(fd, execHeapSize)
	if err != nil {
		return err
	}
	fillKeepHeap(heap)
	done := make(chan backend.Completion, 16)
	vm, err := b.Attach(execSpec(heap, fd, done))
	if err != nil {
		return err
	}
	got, err := runCommands(vm, done, kAlloc, kFill, kLoad)
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]abi.ErrorCode{abi.OK, abi.OK, abi.OK}) {
		return fmt.Errorf("before the keep: %v, %v", got, err)
	}
	k, err := vm.(backend.Keeper).Keep()
	if err != nil {
		return err
	}
	pid, err := pidOf(k.FDs[keptPidfd])
	if err != nil {
		return err
	}
	if err := b.Close(); err != nil {
		return err
	}
	h, err := json.Marshal(execHandover{Kept: k, Heap: fd, Pid: pid})
	if err != nil {
		return err
	}
	env := append(os.Environ(), handoverEnv+"="+string(h))
	return syscall.Exec("/proc/self/exe", []string{os.Args[0], successorCommand}, env)
}

func successor() error {
	var h execHandover
	if err := json.Unmarshal([]byte(os.Getenv(handoverEnv)), &h); err != nil {
		return fmt.Errorf("the hand-over: %w", err)
	}
	b, err := execBackend()
	if err != nil {
		return err
	}
	defer b.Close()
	heap, err := shm.Map(h.Heap, execHeapSize)
	if err != nil {
		return err
	}
	done := make(chan backend.Completion, 16)
	spec := execSpec(heap, h.Heap, done)
	spec.Adopt = &h.Kept
	vm, err := b.Attach(spec)
	closeFDs(h.Kept.FDs)
	if err != nil {
		return err
	}
	got, err := runCommands(vm, done, kReadBack, kLaunch, kAlloc)
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]abi.ErrorCode{abi.OK, abi.OK, abi.ErrBadHandle}) {
		return fmt.Errorf("after the adoption: %v, %v; want ok, ok, bad handle", got, err)
	}
	if !bytes.Equal(heap[kBack:kBack+kSize], heap[kData:kData+kSize]) {
		return errors.New("the buffer read back differs from what was written before the exec")
	}
	if err := vm.Close(); err != nil {
		return err
	}
	if err := unix.Kill(h.Pid, 0); !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("the worker %d after its VM closed: %v, want it reaped", h.Pid, err)
	}
	fmt.Printf("process %d adopted worker %d\n", os.Getpid(), h.Pid)
	return nil
}

func TestKeepAcrossExec(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", predecessorCommand)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the hand-over: %v\n%s", err, stderr.String())
	}
	want := "process " + strconv.Itoa(cmd.Process.Pid) + " adopted worker "
	if !strings.HasPrefix(stdout.String(), want) {
		t.Fatalf("the successor said %q, want %q...", stdout.String(), want)
	}
	t.Log(strings.TrimSpace(stdout.String()))
}
