package cli

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

func vmStats(name string, id uint32, weight uint32, state string, gpuNs, kernels, errs, doorbells uint64) hostapi.VMStats {
	return hostapi.VMStats{
		VM:        hostapi.VM{Name: name, ID: id, Weight: weight, State: state},
		Usage:     hostapi.Usage{Name: name, GPUNs: gpuNs, Kernels: kernels, Errors: errs},
		Doorbells: doorbells,
	}
}

// withMemory sets a VM's device memory use and quota.
func withMemory(v hostapi.VMStats, used, quota uint64) hostapi.VMStats {
	v.MemoryUsed, v.Memory = used, quota
	return v
}

// withBudget sets a VM's in-flight budget state and timeouts.
func withBudget(v hostapi.VMStats, inflightNs, budgetNs, estimateNs, timeouts int64) hostapi.VMStats {
	v.InflightNs, v.InflightBudgetNs, v.EstimateNs, v.Timeouts = inflightNs, budgetNs, estimateNs, timeouts
	return v
}

// scheduled sets a VM's scheduling counters.
func scheduled(v hostapi.VMStats, accountedNs, heldNs int64, held bool) hostapi.VMStats {
	v.AccountedNs, v.HeldNs, v.Held = accountedNs, heldNs, held
	return v
}

// withSyscalls gives a VM GPU system-call counters.
func withSyscalls(v hostapi.VMStats, nulls, opens uint64, proxyCPUNs int64) hostapi.VMStats {
	v.Syscalls = &hostapi.SyscallStats{Calls: map[string]uint64{"null": nulls, "openat": opens}, ProxyCPUNs: proxyCPUNs}
	return v
}

// statsA and statsB are 2 s of backend clock apart. In between the GPU was
// busy 1 s: web 750 ms, batch 250 ms; accounting charged web 720 ms and
// batch 280 ms; batch was held 500 ms and is held at B; "new" appeared,
// held; the poller used 30 ms of CPU.
var (
	statsA = hostapi.Stats{Backend: "fake", Clock: "virtual", Policy: "dfq", Accounting: "loga",
		PollerCPUNs: 100e6, Periods: 10, Now: 1e9, GPUBusyNs: 500e6,
		VMs: []hostapi.VMStats{
			withSyscalls(scheduled(vmStats("web", 1, 2, "connected", 300e6, 100, 0, 50), 280e6, 0, false), 100, 10, 50e6),
			scheduled(vmStats("batch", 12, 1, "connected", 200e6, 10, 0, 5), 220e6, 100e6, false),
		}}
	statsB = hostapi.Stats{Backend: "fake", Clock: "virtual", Policy: "dfq", Accounting: "loga",
		PollerCPUNs: 130e6, Periods: 30, Now: 3e9, GPUBusyNs: 1500e6,
		VMs: []hostapi.VMStats{
			withSyscalls(scheduled(vmStats("web", 1, 2, "connected", 1050e6, 300, 2, 150), 1000e6, 0, false), 2090, 20, 150e6),
			withBudget(withMemory(scheduled(vmStats("batch", 12, 1, "connected", 450e6, 15, 0, 6), 500e6, 600e6, true), 1536<<20, 8<<30),
				13_500_000, 3_250_000, 12_000_000, 2),
			withBudget(scheduled(vmStats("new", 30, 1, "waiting", 0, 0, 0, 0), 0, 0, true), 0, 1_500_000_000, 999_600, 0),
		}}
)

const wantFrameAB = `backend: fake  clock: virtual  interval: 2.000000 s  GPU busy: 50.0%  VMs: 3
policy: dfq  accounting: loga  poller CPU: 1.5% of a core

VM     WEIGHT  STATE        GPU TIME   GPU%  SHARE  ACCT%   HELD  KERNELS/S  KERNELS  ERRORS  DOORBELLS/S  SYSCALLS/S  PROXY CPU         MEMORY       IN FLIGHT      EST  TIMEOUTS
batch       1  connected  0.450000 s  12.5%  25.0%  28.0%  25.0%        2.5       15       0          0.5           -          -  1.5 GiB/8 GiB  13.50ms/3.25ms  12.00ms         2
new         1  waiting    0.000000 s      -      -      -    yes          -        0       0            -           -          -            0 B         0/1.50s   1.00ms         0
web         2  connected  1.050000 s  37.5%  75.0%  72.0%   0.0%      100.0      300       2         50.0      1000.0       5.0%            0 B             0/-        -         0
`

func TestRenderTopFrame(t *testing.T) {
	if got := RenderTopFrame(statsA, statsB); got != wantFrameAB {
		t.Errorf("got\n%s\nwant\n%s", got, wantFrameAB)
	}
}

type topRowWant struct {
	name               string
	hasRates, hasShare bool
	gpuPct, share, kps float64
}

type computeTopTest struct {
	name       string
	prev, cur  hostapi.Stats
	intervalOK bool
	util       float64
	rows       []topRowWant
}

func computeTopTests() []computeTopTest {
	idle := statsA
	idle.Now += 5e8 // clock moved, nothing ran
	recreated := statsB
	recreated.VMs = []hostapi.VMStats{vmStats("web", 99, 2, "waiting", 0, 0, 0, 0)}
	recreated.GPUBusyNs = 0
	deleted := statsB
	deleted.VMs = statsB.VMs[:1]                  // batch was deleted
	deleted.GPUBusyNs = statsB.VMs[0].Usage.GPUNs // the total lost batch with it
	return []computeTopTest{
		{"normal", statsA, statsB, true, 50, []topRowWant{
			{"batch", true, true, 12.5, 25, 2.5},
			{"new", false, false, 0, 0, 0},
			{"web", true, true, 37.5, 75, 100},
		}},
		{"same snapshot", statsA, statsA, false, 0, []topRowWant{
			{"batch", false, false, 0, 0, 0},
			{"web", false, false, 0, 0, 0},
		}},
		{"clock went back", statsB, statsA, false, 0, []topRowWant{
			{"batch", false, false, 0, 0, 0},
			{"web", false, false, 0, 0, 0},
		}},
		{"nothing ran", statsA, idle, true, 0, []topRowWant{
			{"batch", true, false, 0, 0, 0},
			{"web", true, false, 0, 0, 0},
		}},
		{"recreated vm", statsA, recreated, true, 0, []topRowWant{
			{"web", false, false, 0, 0, 0},
		}},
		{"vm deleted", statsA, deleted, true, 37.5, []topRowWant{
			{"web", true, true, 37.5, 100, 100},
		}},
		{"empty", hostapi.Stats{}, hostapi.Stats{Now: 1}, true, 0, nil},
	}
}

func TestComputeTop(t *testing.T) {
	for _, tt := range computeTopTests() {
		t.Run(tt.name, func(t *testing.T) {
			f := computeTop(tt.prev, tt.cur)
			if (f.intervalNs > 0) != tt.intervalOK || f.util != tt.util {
				t.Errorf("interval %d, util %v; want interval ok %v, util %v", f.intervalNs, f.util, tt.intervalOK, tt.util)
			}
			var got []topRowWant
			for _, r := range f.rows {
				got = append(got, topRowWant{r.name, r.hasRates, r.hasShare, r.gpuPct, r.share, r.kernelsPerSec})
			}
			if len(got) != len(tt.rows) {
				t.Fatalf("rows %+v, want %+v", got, tt.rows)
			}
			for i := range got {
				if got[i] != tt.rows[i] {
					t.Errorf("row %d = %+v, want %+v", i, got[i], tt.rows[i])
				}
			}
			// Rendering never divides by zero into NaN or Inf.
			if s := RenderTopFrame(tt.prev, tt.cur); strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
				t.Errorf("frame has NaN/Inf:\n%s", s)
			}
		})
	}
}

func TestRenderTopFrameNoInterval(t *testing.T) {
	want := `backend: fake  clock: virtual  interval: -  GPU busy: -  VMs: 2
policy: dfq  accounting: loga  poller CPU: -

VM     WEIGHT  STATE        GPU TIME  GPU%  SHARE  ACCT%  HELD  KERNELS/S  KERNELS  ERRORS  DOORBELLS/S  SYSCALLS/S  PROXY CPU  MEMORY  IN FLIGHT  EST  TIMEOUTS
batch       1  connected  0.200000 s     -      -      -    no          -       10       0            -           -          -     0 B        0/-    -         0
web         2  connected  0.300000 s     -      -      -    no          -      100       0            -           -          -     0 B        0/-    -         0
`
	if got := RenderTopFrame(statsA, statsA); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestComputeTopScheduling checks the scheduling columns and the poller's
// CPU in the header: ACCT% and HELD per VM, and where they are undefined.
func TestComputeTopScheduling(t *testing.T) {
	type row struct {
		name           string
		held, hasRates bool
		heldPct        float64
		hasAcct        bool
		acct           float64
	}
	noAcct := statsB // accounting off: nothing is charged
	noAcct.VMs = nil
	for _, v := range statsB.VMs {
		noAcct.VMs = append(noAcct.VMs, scheduled(v, 0, v.HeldNs, v.Held))
	}
	noAcctA := statsA
	noAcctA.VMs = nil
	for _, v := range statsA.VMs {
		noAcctA.VMs = append(noAcctA.VMs, scheduled(v, 0, v.HeldNs, v.Held))
	}
	heldBack := statsB // batch's held time went backwards: no baseline for it
	heldBack.VMs = []hostapi.VMStats{scheduled(statsB.VMs[1], 500e6, 50e6, false), statsB.VMs[0]}
	pollerBack := statsB
	pollerBack.PollerCPUNs = 1
	for _, tt := range []struct {
		name      string
		prev, cur hostapi.Stats
		hasPoller bool
		poller    float64
		rows      []row
	}{
		{"normal", statsA, statsB, true, 1.5, []row{
			{"batch", true, true, 25, true, 28},
			{"new", true, false, 0, false, 0},
			{"web", false, true, 0, true, 72},
		}},
		{"accounting off", noAcctA, noAcct, true, 1.5, []row{
			{"batch", true, true, 25, false, 0},
			{"new", true, false, 0, false, 0},
			{"web", false, true, 0, false, 0},
		}},
		{"held went back", statsA, heldBack, true, 1.5, []row{
			{"batch", false, false, 0, false, 0},
			{"web", false, true, 0, true, 100},
		}},
		{"poller went back", statsA, pollerBack, false, 0, []row{
			{"batch", true, true, 25, true, 28},
			{"new", true, false, 0, false, 0},
			{"web", false, true, 0, true, 72},
		}},
		{"no interval", statsB, statsB, false, 0, []row{
			{"batch", true, false, 0, false, 0},
			{"new", true, false, 0, false, 0},
			{"web", false, false, 0, false, 0},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := computeTop(tt.prev, tt.cur)
			if f.hasPoller != tt.hasPoller || f.pollerPct != tt.poller || f.policy != "dfq" || f.accounting != "loga" {
				t.Errorf("frame: poller %v %v, policy %q, accounting %q; want poller %v %v, dfq, loga",
					f.hasPoller, f.pollerPct, f.policy, f.accounting, tt.hasPoller, tt.poller)
			}
			var got []row
			for _, r := range f.rows {
				got = append(got, row{r.name, r.held, r.hasRates, r.heldPct, r.hasAcct, r.acctShare})
			}
			if !slices.Equal(got, tt.rows) {
				t.Errorf("rows\n %+v\nwant\n %+v", got, tt.rows)
			}
		})
	}
}

func TestTopCommand(t *testing.T) {
	const interval = "--interval=1ms"
	tests := []struct {
		name   string
		args   []string
		term   bool
		frames int
	}{
		{"once", []string{"--once", interval}, false, 1},
		{"duration", []string{"--duration=3ms", interval}, false, 3},
		{"duration shorter than interval", []string{"--duration=1ns", interval}, false, 1},
		{"terminal", []string{"--duration=2ms", interval}, true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDaemon()
			f.stats = []hostapi.Stats{statsA, statsB}
			socket := f.serve(t)
			r := runCLI(t.Context(), nil, tt.term, append([]string{"--socket", socket, "top"}, tt.args...)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("code %d, stderr %q", r.code, r.stderr)
			}
			// Frames after the first compare statsB with itself.
			frames := []string{wantFrameAB}
			for len(frames) < tt.frames {
				frames = append(frames, RenderTopFrame(statsB, statsB))
			}
			want := strings.Join(frames, "\n")
			if tt.term {
				want = clearScreen + strings.Join(frames, clearScreen)
			}
			if r.stdout != want {
				t.Errorf("stdout\n%q\nwant\n%q", r.stdout, want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.nStats != tt.frames+1 {
				t.Errorf("%d stats requests, want %d", f.nStats, tt.frames+1)
			}
		})
	}
}

func TestTopInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := newFakeDaemon()
	f.stats = []hostapi.Stats{statsA, statsB}
	f.onStats = func(n int) {
		if n == 3 {
			cancel() // Ctrl-C while top runs forever
		}
	}
	socket := f.serve(t)
	r := runCLI(ctx, nil, false, "--socket", socket, "top", "--interval=1ms")
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, wantFrameAB) {
		t.Errorf("got %+v", r)
	}
}

func TestTopUsage(t *testing.T) {
	hint := "\nRun 'sluicectl top --help' for usage.\n"
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"--interval=0s"}, "sluicectl: --interval must be positive" + hint},
		{[]string{"--duration=-1s"}, "sluicectl: --duration must not be negative" + hint},
		{[]string{"--once", "--duration=5s"}, "sluicectl: --once and --duration cannot be used together" + hint},
		{[]string{"--interval=fast"}, "sluicectl: invalid argument \"fast\" for \"--interval\" flag: " +
			"time: invalid duration \"fast\"" + hint},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			socket := newFakeDaemon().serve(t)
			r := runCLI(t.Context(), nil, false, append([]string{"--socket", socket, "top"}, tt.args...)...)
			if r != (result{stderr: tt.stderr, code: 2}) {
				t.Errorf("got %+v, want stderr %q", r, tt.stderr)
			}
		})
	}
}

func TestTopStatsError(t *testing.T) {
	socket := newFakeDaemon().serve(t) // no stats configured: 500
	r := runCLI(t.Context(), nil, false, "--socket", socket, "top", "--once", "--interval=1ms")
	// The daemon's wording is the client's business; the CLI adds what it did.
	if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "sluicectl: sampling stats: ") ||
		!strings.HasSuffix(r.stderr, "no stats configured\n") {
		t.Errorf("got %+v", r)
	}
}

// TestTopArbitration: the header names the arbitration in force, and under
// auto the switches.
func TestTopArbitration(t *testing.T) {
	for _, tt := range []struct {
		arb, holder string
		auto        bool
		switches    uint64
		want        string
	}{
		{"driver", "", false, 0, ""},
		{"turns", "web", false, 0, "turns (holder web)"},
		{"turns", "", true, 3, "auto: turns (holder -), 3 switches"},
		{"driver", "", true, 4, "auto: driver, 4 switches"},
	} {
		cur := statsB
		cur.Arbitration, cur.TurnHolder, cur.ArbitrationAuto, cur.ArbitrationSwitches = tt.arb, tt.holder, tt.auto, tt.switches
		f := computeTop(statsA, cur)
		if f.arbitration != tt.want {
			t.Errorf("%+v: arbitration %q, want %q", tt, f.arbitration, tt.want)
		}
		if frame := RenderTopFrame(statsA, cur); tt.want != "" && !strings.Contains(frame, "arbitration: "+tt.want+"\n") {
			t.Errorf("%+v: the frame does not say %q:\n%s", tt, tt.want, frame)
		}
	}
}
