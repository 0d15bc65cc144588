package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// clockSyncPTX relates %globaltimer to the host's clock (the hop
// diagnostic, hops.go): one thread plays rounds 1..n; in round i it spins
// until the host's flag reaches i, reads %globaltimer, and writes the read
// then i (after a system-scope fence) to out. The host times each round
// from its store of the flag to its sight of i: the GPU's read lies
// between. A flag of 2^64-1 ends every round at once (the host gave up).
const clockSyncPTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry sluice_clocksync(
	.param .u64 p_flag,
	.param .u64 p_out,
	.param .u64 p_n
)
{
	.reg .pred %p<3>;
	.reg .b64 %rd<8>;

	ld.param.u64 %rd1, [p_flag];
	ld.param.u64 %rd2, [p_out];
	ld.param.u64 %rd3, [p_n];
	mov.u64 %rd4, 1;
ROUND:
	ld.volatile.global.u64 %rd5, [%rd1];
	setp.lt.u64 %p1, %rd5, %rd4;
	@%p1 bra ROUND;
	mov.u64 %rd6, %globaltimer;
	st.volatile.global.u64 [%rd2], %rd6;
	membar.sys;
	st.volatile.global.u64 [%rd2+8], %rd4;
	add.u64 %rd4, %rd4, 1;
	setp.le.u64 %p2, %rd4, %rd3;
	@%p2 bra ROUND;
	ret;
}
`

const clockSyncName = "sluice_clocksync"

// clockSyncRounds is how many round trips a sync times; the fastest one
// gives the relation.
const clockSyncRounds = 200

// clockSyncWait bounds one round (the first includes the launch).
const clockSyncWait = 200 * time.Millisecond

// syncGPUClock relates the GPU's %globaltimer to CLOCK_MONOTONIC (mc) in
// the current context, on a stream of its own. Its page stays registered
// (and mapped) until the process ends: the diagnostic runs once a process.
func syncGPUClock(d driver, mc monoClock) (GPUClock, error) {
	mod, err := d.ModuleLoadData(append([]byte(clockSyncPTX), 0))
	if err != nil {
		return GPUClock{}, fmt.Errorf("loading the clock sync kernel: %w", err)
	}
	fn, err := d.ModuleGetFunction(mod, clockSyncName)
	if err != nil {
		return GPUClock{}, fmt.Errorf("finding the clock sync kernel: %w", err)
	}
	s, err := d.StreamCreate()
	if err != nil {
		return GPUClock{}, fmt.Errorf("creating the clock sync stream: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return GPUClock{}, fmt.Errorf("mapping the clock sync page: %w", err)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	if err := d.MemHostRegister(base, 4096); err != nil {
		_ = unix.Munmap(mem)
		return GPUClock{}, fmt.Errorf("registering the clock sync page: %w", err)
	}
	dev, err := d.MemHostGetDevicePointer(base)
	if err != nil {
		return GPUClock{}, fmt.Errorf("mapping the clock sync page: %w", err)
	}
	flag := (*uint64)(base)
	out := (*uint64)(unsafe.Add(base, 64))
	seen := (*uint64)(unsafe.Add(base, 72))
	args := make([]byte, 24)
	le.PutUint64(args[0:], uint64(dev))
	le.PutUint64(args[8:], uint64(dev+64))
	le.PutUint64(args[16:], clockSyncRounds)
	if err := d.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, args); err != nil {
		return GPUClock{}, fmt.Errorf("launching the clock sync kernel: %w", err)
	}
	return clockRounds(flag, out, seen, mc)
}

// clockRounds plays the host's side of the rounds.
func clockRounds(flag, out, seen *uint64, mc monoClock) (GPUClock, error) {
	best := GPUClock{UncertaintyNs: math.MaxInt64}
	for i := uint64(1); i <= clockSyncRounds; i++ {
		h1 := mc.now()
		atomic.StoreUint64(flag, i)
		deadline := time.Now().Add(clockSyncWait)
		for k := 0; atomic.LoadUint64(seen) < i; k++ {
			if k%1024 == 1023 {
				runtime.Gosched() // a round that waits this long is not the fastest anyway
			}
			if time.Now().After(deadline) {
				atomic.StoreUint64(flag, math.MaxUint64) // the kernel ends
				return GPUClock{}, fmt.Errorf("round %d of the clock sync: no answer within %v", i, clockSyncWait)
			}
		}
		h2 := mc.now()
		g := int64(atomic.LoadUint64(out))
		if half := (h2 - h1) / 2; half < best.UncertaintyNs {
			best.UncertaintyNs, best.OffsetNs = half, g-(h1+half)
		}
		best.Rounds++
	}
	if best.Rounds == 0 {
		return GPUClock{}, errors.New("the clock sync played no round")
	}
	best.OK = true
	return best, nil
}
