package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/transport/process"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/internal/shm"
	_ "github.com/sluice-gpu/sluice/mediator/backend/sim"
)

func newDaemon(t testing.TB, clock, stateDir string) *Daemon {
	t.Helper()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Socket = filepath.Join(dir, "sluiced.sock")
	cfg.StateDir = stateDir
	cfg.Clock = clock
	cfg.Proxy.Binary = "off" // the e2e suite starts real proxies
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// guest joins a VM's endpoint as a process guest, as QEMU would.
func guest(t testing.TB, vm hostapi.VM) *sdk.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := process.Dial(ctx, vm.Endpoint, vm.Vectors)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := sdk.Open(tr)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func channel(t testing.TB, dev *sdk.Device, i int) *sdk.Channel {
	t.Helper()
	ch, err := dev.Channel(i)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func createVM(t testing.TB, d *Daemon, name string) hostapi.VM {
	t.Helper()
	vm, err := d.CreateVM(context.Background(), hostapi.CreateVMRequest{Name: name, Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// Two process guests submit throttle kernels concurrently through real
// doorbells; the mediator's counts match what each submitted exactly.
func TestTwoGuestsCountsMatchExactly(t *testing.T) {
	for _, clock := range []string{"virtual", "wall"} {
		t.Run(clock, func(t *testing.T) {
			d := newDaemon(t, clock, t.TempDir())
			runs := []struct {
				name    string
				kernels int
				kernel  time.Duration
			}{{"short", 400, 100 * time.Microsecond}, {"long", 60, time.Millisecond}}
			if clock == "wall" {
				runs[0].kernels, runs[1].kernels = 100, 20
			}
			var wg sync.WaitGroup
			results := make([]workload.ThrottleResult, len(runs))
			errs := make([]error, len(runs))
			for i, r := range runs {
				ch := channel(t, guest(t, createVM(t, d, r.name)), 1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					results[i], errs[i] = workload.Throttle(ctx, ch, workload.ThrottleConfig{Kernel: r.kernel, Kernels: r.kernels})
				}()
			}
			wg.Wait()
			for i, r := range runs {
				if errs[i] != nil {
					t.Fatalf("%s: %v", r.name, errs[i])
				}
				if results[i].Kernels != r.kernels {
					t.Fatalf("%s: guest completed %d kernels, want %d", r.name, results[i].Kernels, r.kernels)
				}
				u, err := d.Usage(context.Background(), r.name)
				if err != nil {
					t.Fatal(err)
				}
				want := uint64(r.kernels) * uint64(r.kernel)
				if u.Kernels != uint64(r.kernels) || u.Commands != uint64(r.kernels) || u.GPUNs != want || u.Errors != 0 {
					t.Fatalf("%s: usage %+v, want %d kernels and %d ns", r.name, u, r.kernels, want)
				}
			}
		})
	}
}

// A VM that writes garbage into its ring gets error codes on that channel;
// the other VM's work and the daemon carry on untouched.
func TestMalformedRingIsIsolated(t *testing.T) {
	d := newDaemon(t, "virtual", t.TempDir())
	good := channel(t, guest(t, createVM(t, d, "good")), 0)
	badDev := guest(t, createVM(t, d, "bad"))
	bad := channel(t, badDev, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var wg sync.WaitGroup
	// Registered after the guests' cleanups, so it runs before them: the
	// good guest stops before its mapping goes away, even if this test fails.
	t.Cleanup(func() { cancel(); wg.Wait() })
	var goodRes workload.ThrottleResult
	var goodErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		goodRes, goodErr = workload.Throttle(ctx, good, workload.ThrottleConfig{Kernel: 50 * time.Microsecond, Kernels: 2000})
	}()

	unknownOp := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: 1})
	unknownOp[0] = 0x7f
	reserved := abi.EncodeCommand(abi.Command{Op: abi.OpNop})
	reserved[40] = 1
	cases := []struct {
		name string
		rec  abi.Record
		want abi.ErrorCode
	}{
		{"unknown opcode", unknownOp, abi.ErrBadOpcode},
		{"zeroed record", abi.Record{}, abi.ErrBadOpcode},
		{"reserved bytes", reserved, abi.ErrBadRecord},
		{"copy past the heap", abi.EncodeCommand(abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, HeapOff: badDev.Layout().HeapSize - 8, Length: 16}), abi.ErrHeapRange},
		{"memset of an unknown buffer", abi.EncodeCommand(abi.Command{Op: abi.OpMemset, Handle: 77, Length: 8}), abi.ErrBadHandle},
		{"throttle too long", abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: 1 << 60}), abi.ErrTooLong},
	}
	for _, c := range cases {
		idx, err := bad.SubmitRecord(ctx, c.rec)
		if err != nil {
			t.Fatalf("%s: submitting: %v", c.name, err)
		}
		err = bad.Wait(ctx, idx)
		var ce *sdk.ChannelError
		if !errors.As(err, &ce) || ce.Code != c.want || ce.Index != idx {
			t.Fatalf("%s: wait = %v, want %v at %d", c.name, err, c.want, idx)
		}
		if err := bad.Reset(ctx); err != nil {
			t.Fatalf("%s: reset: %v", c.name, err)
		}
	}

	// put far outside the ring.
	region := shm.New(badDev.Transport().Region())
	putOff := badDev.Layout().ChannelOff(0) + abi.ChPut
	region.Store32(putOff, region.Load32(putOff)+1<<20)
	if err := badDev.Doorbell(0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { code, _ := bad.Err(); return code == abi.ErrRingOverflow })

	// A guest rewriting records while the host reads them: whatever the host
	// copies is either valid and run, or rejected; nothing else happens.
	other := channel(t, badDev, 1)
	stop := make(chan struct{})
	scribbled := make(chan struct{})
	go func() {
		defer close(scribbled)
		ringOff := badDev.Layout().RingOff(1)
		valid := abi.EncodeCommand(abi.Command{Op: abi.OpThrottle, DurationNs: 10})
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			slot := ringOff + uint64(i%int(badDev.Layout().RingEntries))*abi.RecordSize
			if i%2 == 0 {
				region.CopyIn(slot, valid[:])
			} else {
				region.CopyIn(slot, unknownOp[:])
			}
		}
	}()
	for range 200 {
		idx, err := other.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Wait(ctx, idx); err != nil {
			if !errors.Is(err, abi.ErrBadOpcode) && !errors.Is(err, abi.ErrTooLong) && !errors.Is(err, abi.ErrBadRecord) {
				t.Fatalf("scribbled ring: unexpected %v", err)
			}
			if err := other.Reset(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	<-scribbled

	wg.Wait()
	if goodErr != nil || goodRes.Kernels != 2000 || goodRes.Errors != 0 {
		t.Fatalf("good vm: %+v, %v", goodRes, goodErr)
	}
	u, err := d.Usage(ctx, "good")
	if err != nil || u.Kernels != 2000 || u.Errors != 0 || u.GPUNs != 2000*50_000 {
		t.Fatalf("good vm usage %+v, %v", u, err)
	}
	if ub, _ := d.Usage(ctx, "bad"); ub.Errors < uint64(len(cases))+1 {
		t.Fatalf("bad vm usage counts %d errors, want at least %d", ub.Errors, len(cases)+1)
	}
	if _, err := d.Stats(ctx); err != nil {
		t.Fatalf("daemon unwell after garbage: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Usage is billing data: it survives a restart of the daemon, and the VM
// list is restored.
func TestUsageSurvivesRestart(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	ctx := context.Background()
	if _, err := workload.Throttle(ctx, ch, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 30}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := newDaemon(t, "virtual", state)
	u, err := d2.Usage(ctx, "a")
	if err != nil || u.Kernels != 30 || u.GPUNs != 30*100_000 {
		t.Fatalf("after restart: %+v, %v", u, err)
	}
	vm, err := d2.GetVM(ctx, "a")
	if err != nil {
		t.Fatalf("vm not restored: %v", err)
	}
	ch2 := channel(t, guest(t, vm), 0)
	if _, err := workload.Throttle(ctx, ch2, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 10}); err != nil {
		t.Fatal(err)
	}
	if err := d2.DeleteVM(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vm.Endpoint); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("endpoint socket left behind: %v", err)
	}
	u, err = d2.Usage(ctx, "a")
	if err != nil || u.Kernels != 40 {
		t.Fatalf("usage after delete: %+v, %v", u, err)
	}
	if _, err := d2.GetVM(ctx, "a"); !errors.Is(err, hostapi.ErrNotFound) {
		t.Fatalf("deleted vm still there: %v", err)
	}
}

func TestCreateVMErrors(t *testing.T) {
	d := newDaemon(t, "virtual", t.TempDir())
	ctx := context.Background()
	createVM(t, d, "a")
	tests := []struct {
		req  hostapi.CreateVMRequest
		want error
	}{
		{hostapi.CreateVMRequest{Name: "a"}, hostapi.ErrExists},
		{hostapi.CreateVMRequest{Name: "../x"}, hostapi.ErrInvalid},
		{hostapi.CreateVMRequest{Name: ""}, hostapi.ErrInvalid},
		{hostapi.CreateVMRequest{Name: "b", RegionSize: 3 << 20}, hostapi.ErrInvalid},
		{hostapi.CreateVMRequest{Name: "b", Channels: abi.MaxChannels + 1}, hostapi.ErrInvalid},
	}
	for _, tt := range tests {
		if _, err := d.CreateVM(ctx, tt.req); !errors.Is(err, tt.want) {
			t.Errorf("create %+v: %v, want %v", tt.req, err, tt.want)
		}
	}
	if err := d.DeleteVM(ctx, "nope"); !errors.Is(err, hostapi.ErrNotFound) {
		t.Errorf("delete of unknown vm: %v", err)
	}
}

// A doorbell storm from one VM (every vector, as fast as it can, including
// ones past the channels) neither stops nor perturbs another VM's work.
func TestDoorbellStormIsIsolated(t *testing.T) {
	d := newDaemon(t, "virtual", t.TempDir())
	quiet := channel(t, guest(t, createVM(t, d, "quiet")), 0)
	stormVM := createVM(t, d, "storm")
	storm := guest(t, stormVM)

	stop := make(chan struct{})
	var rung sync.WaitGroup
	rung.Add(1)
	go func() {
		defer rung.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = storm.Doorbell(i % stormVM.Vectors)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := workload.Throttle(ctx, quiet, workload.ThrottleConfig{Kernel: 100 * time.Microsecond, Kernels: 1000})
	close(stop)
	rung.Wait()
	if err != nil || res.Kernels != 1000 {
		t.Fatalf("quiet vm: %+v, %v", res, err)
	}
	u, err := d.Usage(ctx, "quiet")
	if err != nil || u.Kernels != 1000 || u.GPUNs != 1000*100_000 {
		t.Fatalf("quiet vm usage %+v, %v", u, err)
	}
	st, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st.VMs {
		if v.Name == "storm" && (v.Doorbells == 0 || v.Usage.Commands != 0) {
			t.Fatalf("storm vm: %d doorbells, %d commands", v.Doorbells, v.Usage.Commands)
		}
	}
}

// An endpoint that cannot be created (a file squats its socket path) is a
// clean error, not a crash, and leaves nothing registered.
func TestCreateVMEndpointError(t *testing.T) {
	d := newDaemon(t, "virtual", t.TempDir())
	if err := os.WriteFile(filepath.Join(d.Config().EndpointDir, "x.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateVM(context.Background(), hostapi.CreateVMRequest{Name: "x"}); err == nil {
		t.Fatal("created a vm over a squatted socket path")
	}
	if vms, _ := d.ListVMs(context.Background()); len(vms) != 0 {
		t.Fatalf("failed vm registered: %+v", vms)
	}
}

// Deleting a VM waits for its GPU work outside the daemon lock: the host
// API keeps answering meanwhile.
func TestDeleteDoesNotBlockOthers(t *testing.T) {
	d := newDaemon(t, "wall", t.TempDir())
	ctx := context.Background()
	createVM(t, d, "other")
	busy, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "busy", MaxCommandNs: int64(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	ch := channel(t, guest(t, busy), 0)
	if _, err := ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: uint64(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return ch.State() == abi.ChannelBusy })
	deleted := make(chan error, 1)
	go func() { deleted <- d.DeleteVM(ctx, "busy") }()
	waitFor(t, func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.deleting["busy"] })
	if _, err := d.GetVM(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "busy"}); !errors.Is(err, hostapi.ErrExists) {
		t.Fatalf("create during delete: %v", err)
	}
	select {
	case err := <-deleted:
		t.Fatalf("delete returned before the 2 s command ended (%v): the test proves nothing", err)
	default:
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if u, err := d.Usage(ctx, "busy"); err != nil || u.GPUNs != uint64(2*time.Second) {
		t.Fatalf("usage after delete: %+v, %v", u, err)
	}
}

// TestMemoryQuota: a VM's quota from create is enforced on its guest's
// ALLOCs (the channel fails with ErrNoMemory and goes on after a reset),
// shows in the VM with the use, changes at run time and survives a
// restart.
func TestMemoryQuota(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ctx := context.Background()
	vm, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "a", Channels: 1, Memory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Memory != 1<<20 || vm.MemoryUsed != 0 {
		t.Fatalf("created with memory %d, used %d", vm.Memory, vm.MemoryUsed)
	}
	ch := channel(t, guest(t, vm), 0)
	handle := uint32(0)
	alloc := func(n uint64) abi.ErrorCode {
		t.Helper()
		handle++
		idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpAlloc, Handle: handle, Size: n})
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Wait(ctx, idx); err == nil {
			return abi.OK
		}
		code, _ := ch.Err()
		if err := ch.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := alloc(1<<20 + 1); code != abi.ErrNoMemory {
		t.Fatalf("an ALLOC past the quota: %v", code)
	}
	if code := alloc(768 << 10); code != abi.OK {
		t.Fatalf("an ALLOC within the quota: %v", code)
	}
	if vm, _ = d.GetVM(ctx, "a"); vm.MemoryUsed != 768<<10 {
		t.Errorf("used %d, want %d", vm.MemoryUsed, 768<<10)
	}
	half := uint64(512 << 10)
	if vm, err = d.UpdateVM(ctx, "a", hostapi.UpdateVMRequest{Memory: &half}); err != nil || vm.Memory != half {
		t.Fatalf("lowering the quota below the use: %+v, %v", vm, err)
	}
	if code := alloc(1); code != abi.ErrNoMemory {
		t.Errorf("an ALLOC over a lowered quota: %v", code)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := newDaemon(t, "virtual", state)
	if vm, err = d2.GetVM(ctx, "a"); err != nil || vm.Memory != half || vm.MemoryUsed != 0 {
		t.Fatalf("after a restart: %+v, %v; want the quota %d", vm, err, half)
	}
}

// TestMaxCommand: a VM takes the daemon's longest command unless it has
// its own; its guest sees it as the longest THROTTLE (a longer one fails
// with ErrTooLong); it changes at run time (0: back to the daemon's), is
// refused outside its range, and survives a restart.
func TestMaxCommand(t *testing.T) {
	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ctx := context.Background()
	def := int64(DefaultConfig().MaxCommand)
	a, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "a", Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxCommandNs != def || a.Timeouts != 0 {
		t.Fatalf("a VM without its own: max command %d, %d timeouts; want %d, 0", a.MaxCommandNs, a.Timeouts, def)
	}
	b, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "b", Channels: 1, MaxCommandNs: 2e6})
	if err != nil || b.MaxCommandNs != 2e6 {
		t.Fatalf("a VM with its own: %+v, %v", b, err)
	}
	if _, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "c", MaxCommandNs: 1000}); !errors.Is(err, hostapi.ErrInvalid) {
		t.Fatalf("a longest command of 1µs: %v, want ErrInvalid", err)
	}
	dev := guest(t, b)
	if got := dev.Header().Limits.MaxThrottleNs; got != 2e6 {
		t.Fatalf("b's guest sees a longest throttle of %d, want 2e6", got)
	}
	ch := channel(t, dev, 0)
	idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 2e6 + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err == nil {
		t.Fatal("a THROTTLE past the VM's longest command completed")
	}
	if code, _ := ch.Err(); code != abi.ErrTooLong {
		t.Fatalf("a THROTTLE past the VM's longest command: %v, want %v", code, abi.ErrTooLong)
	}
	five, zero, bad := int64(5e6), int64(0), int64(2*time.Hour)
	if _, err := d.UpdateVM(ctx, "a", hostapi.UpdateVMRequest{MaxCommandNs: &bad}); !errors.Is(err, hostapi.ErrInvalid) {
		t.Fatalf("a longest command of 2h: %v, want ErrInvalid", err)
	}
	if a, err = d.UpdateVM(ctx, "a", hostapi.UpdateVMRequest{MaxCommandNs: &five}); err != nil || a.MaxCommandNs != five {
		t.Fatalf("a set to 5ms: %+v, %v", a, err)
	}
	if b, err = d.UpdateVM(ctx, "b", hostapi.UpdateVMRequest{MaxCommandNs: &zero}); err != nil || b.MaxCommandNs != def {
		t.Fatalf("b back to the default: %+v, %v", b, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := newDaemon(t, "virtual", state)
	if a, err = d2.GetVM(ctx, "a"); err != nil || a.MaxCommandNs != five {
		t.Fatalf("a after a restart: %+v, %v; want %d", a, err, five)
	}
	if b, err = d2.GetVM(ctx, "b"); err != nil || b.MaxCommandNs != def {
		t.Fatalf("b after a restart: %+v, %v; want the default %d", b, err, def)
	}
}

// TestInflightBudget: a VM's in-flight budget is in the host API (vm get and
// stats): the daemon's fixed budget, nothing in flight once its commands
// completed, and the work estimate once a MEMSET was measured; a negative
// --inflight-budget shows none.
func TestInflightBudget(t *testing.T) {
	for _, tc := range []struct {
		budget time.Duration
		want   int64
	}{{5 * time.Millisecond, 5e6}, {-time.Second, 0}} {
		cfg := DefaultConfig()
		cfg.Socket = filepath.Join(t.TempDir(), "sluiced.sock")
		cfg.StateDir = t.TempDir()
		cfg.Clock = "virtual"
		cfg.Proxy.Binary = "off"
		cfg.InflightBudget = tc.budget
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		vm, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "a", Channels: 1})
		if err != nil {
			t.Fatal(err)
		}
		if vm.InflightBudgetNs != tc.want || vm.InflightNs != 0 || vm.EstimateNs != 0 {
			t.Errorf("--inflight-budget %v: a new VM shows budget %d, in flight %d, estimate %d; want %d, 0, 0",
				tc.budget, vm.InflightBudgetNs, vm.InflightNs, vm.EstimateNs, tc.want)
		}
		ch := channel(t, guest(t, vm), 0)
		for _, c := range []abi.Command{{Op: abi.OpAlloc, Handle: 1, Size: 1 << 20}, {Op: abi.OpMemset, Handle: 1, Length: 1 << 20}} {
			idx, err := ch.Submit(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Wait(ctx, idx); err != nil {
				t.Fatalf("%v: %v", c.Op, err)
			}
		}
		// The guest sees a completion before the budget is given its cost
		// back (after the channel's lock): wait for it a moment.
		for end := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
			if vm, err = d.GetVM(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if vm.InflightNs == 0 || time.Now().After(end) {
				break
			}
		}
		if vm.InflightBudgetNs != tc.want || vm.InflightNs != 0 || vm.EstimateNs <= 0 {
			t.Errorf("--inflight-budget %v: after a MEMSET budget %d, in flight %d, estimate %d; want %d, 0 and a positive estimate",
				tc.budget, vm.InflightBudgetNs, vm.InflightNs, vm.EstimateNs, tc.want)
		}
		st, err := d.Stats(ctx)
		if err != nil || len(st.VMs) != 1 || st.VMs[0].InflightBudgetNs != vm.InflightBudgetNs || st.VMs[0].EstimateNs != vm.EstimateNs {
			t.Errorf("stats %+v, %v; want the budget vm get shows", st.VMs, err)
		}
		cancel()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
