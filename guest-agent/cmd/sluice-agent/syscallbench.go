package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/gpucall"
	"github.com/sluice-gpu/sluice/guest-agent/kernels"
)

// benchNull is one null-call measurement: callers work-items each making
// iterations blocking SysNull calls (or, with the fastcall flag, the curried
// call numbered SysNull).
type benchNull struct {
	Callers    int    `json:"callers"`
	Grid       uint32 `json:"grid"`
	Block      uint32 `json:"block"`
	Iterations uint32 `json:"iterations"`
	Calls      int    `json:"calls"`
	// Path is how the calls reached the host: "ring" (the request ring)
	// or "slots".
	Path string `json:"path"`
	// Caller is what one caller is: "work-item" or "warp" (--caller).
	Caller    string  `json:"caller"`
	WallS     float64 `json:"wall_s"` // the launch, submit to completion
	CallsPerS float64 `json:"calls_per_s"`
	P50Ns     uint32  `json:"p50_ns"` // per-call round trips on the GPU's %globaltimer
	P99Ns     uint32  `json:"p99_ns"`
	MaxNs     uint32  `json:"max_ns"`
	hostCPU
}

// hostCPU is the CPU the host processes named by --cpu-pid spent during a
// measurement (the sum of their threads' run time, /proc/PID/task/*/schedstat).
type hostCPU struct {
	HostCPUNs      int64            `json:"host_cpu_ns,omitempty"`
	HostCPUNsCall  float64          `json:"host_cpu_ns_per_call,omitempty"`
	HostCPUByPID   map[string]int64 `json:"host_cpu_ns_by_pid,omitempty"`
	HostCPUPerWall float64          `json:"host_cpus_busy,omitempty"` // host CPU / wall: cores kept busy
}

type benchPread struct {
	Kind      string  `json:"kind"` // generic (sluice_pread_sweep) or fastcall (sluice_sys_null with the fastcall flag)
	Callers   int     `json:"callers"`
	Calls     int     `json:"calls"`
	Bytes     uint64  `json:"bytes,omitempty"`
	Failed    uint64  `json:"failed,omitempty"`
	WallS     float64 `json:"wall_s"`
	CallsPerS float64 `json:"calls_per_s"`
	P50Ns     uint32  `json:"p50_ns,omitempty"`
	P99Ns     uint32  `json:"p99_ns,omitempty"`
	hostCPU
}

type benchResult struct {
	Label string       `json:"label,omitempty"`
	Slots int          `json:"slots"`
	Null  []benchNull  `json:"null"`
	Pread []benchPread `json:"pread,omitempty"`
	// FastcallNumber is the curried pread's number; the fastcall run needs
	// it to be SysNull (the null program's call number), see the command's
	// help.
	FastcallNumber uint16 `json:"fastcall_number,omitempty"`
	// GenericOverFastcallCPU is the host CPU per generic pread over that
	// per fastcall pread.
	GenericOverFastcallCPU float64 `json:"generic_over_fastcall_cpu,omitempty"`
	// Phases are the diagnostic runs (--phases): where a null call's time
	// goes on the GPU.
	Phases []benchPhases `json:"phases,omitempty"`
	Note   string        `json:"note,omitempty"`
}

// benchPhases is one run of the diagnostic kernels.NullPhases: p50 of each
// phase of a blocking null call (ns, %globaltimer), by mode.
type benchPhases struct {
	Mode       uint32  `json:"mode"` // kernels.Phase* bits
	Callers    int     `json:"callers"`
	Iterations uint32  `json:"iterations"`
	Calls      int     `json:"calls"`
	WallS      float64 `json:"wall_s"`
	// GPUSpanS runs from the first call's start to the last call's end
	// on the GPU's clock: calls / GPUSpanS is the launch-free rate.
	GPUSpanS     float64 `json:"gpu_span_s"`
	GPUCallsPerS float64 `json:"gpu_calls_per_s"`
	ClaimP50     uint32  `json:"claim_p50_ns"`    // t0 → claimed
	PopulateP50  uint32  `json:"populate_p50_ns"` // claimed → fields written
	RingP50      uint32  `json:"ring_p50_ns"`     // fields → READY stored (its fence)
	WaitP50      uint32  `json:"wait_p50_ns"`     // READY → FINISHED seen
	FreeP50      uint32  `json:"free_p50_ns"`     // FINISHED seen → freed
	TotalP50     uint32  `json:"total_p50_ns"`
	TotalP99     uint32  `json:"total_p99_ns"`
	PollsP50     uint32  `json:"polls_p50"`
	// TimerStepNs is the smallest nonzero difference between two of a
	// call's timestamps: %globaltimer's resolution, or more.
	TimerStepNs uint32 `json:"timer_step_ns"`
	hostCPU
}

func newSyscallBenchCmd(g *globals) *cobra.Command {
	var (
		f            gpuFlags
		callers      []int
		calls        int
		blockMax     uint32
		pids         []int
		label        string
		preadPath    string
		preadCalls   int
		preadCallers int
		phases       []int
		phaseCallers []int
		phaseIters   uint32
		shared       bool
		path         string
		unit         string
	)
	cmd := &cobra.Command{
		Use:   "syscall-bench",
		Short: "Measure GPU system calls: null round trips and calls/s by callers, host CPU per call, generic vs fastcall pread",
		Long: `For each caller count (work-item granularity, grid × block work-items),
launch sluice_sys_null with every caller making blocking null calls, and report
the per-call round trips the GPU threads measured on %globaltimer (p50, p99),
the calls per second over the launch, and, for the host processes given with
--cpu-pid (sluiced, the VM's proxy, its GPU worker), the CPU they spent per
call (their threads' run time from /proc/PID/task/*/schedstat).

With --pread-path, it also compares a 4 KiB pread made the generic way (the
sluice_pread_sweep program: the proxy checks and serves each call) with the
same pread as a fastcall (the forwarder runs it with no checks and no trip to
the proxy), at --pread-callers concurrent callers. The fastcall run reuses the
null program with the fastcall flag, so the curried pread must carry the null
call's number (0x400: index 0, generation 1); the command registers, revokes
and registers again until it does (a VM whose fastcall entry 0 is taken by
someone else cannot run it). Set the coalescing window with sluicectl vm set
between runs and tell them apart with --label.`,
		Example: `  sluice-agent run syscall-bench --backend cuda --cpu-pid $(pidof sluiced) --cpu-pid $PROXY \
      --pread-path /bench.bin --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path != "ring" && path != "slots" {
				return fmt.Errorf("--path %q: want ring or slots", path)
			}
			if unit != "work-item" && unit != "warp" {
				return fmt.Errorf("--caller %q: want work-item or warp", unit)
			}
			return withRunner(cmd, g, &f, func(ctx context.Context, r *gpucall.Runner) error {
				res := benchResult{Label: label, Slots: r.Slots()}
				// A first launch pays for what is done once (the module's
				// functions, the poller waking): not measured.
				if _, err := r.Null(ctx, 1, 1, abi.ProgWorkItem, 8, gpucall.NullOptions{Flags: abi.SysFlagBlocking}); err != nil {
					return fmt.Errorf("warming up: %w", err)
				}
				r.Reset()
				for _, n := range callers {
					if n <= 0 {
						return fmt.Errorf("--callers %d", n)
					}
					shape := nullShape{grid: uint32(n), block: warpSize, granularity: abi.ProgWorkGroup}
					if unit == "work-item" {
						shape.block = min(uint32(n), blockMax)
						shape.grid = uint32(n) / shape.block
						shape.granularity = abi.ProgWorkItem
						if shape.grid*shape.block != uint32(n) {
							return fmt.Errorf("--callers %d is not a multiple of --block-max %d", n, blockMax)
						}
					}
					iters := uint32(max(1, calls/n))
					m, err := benchNullRun(ctx, r, shape, iters, abi.SysFlagBlocking, shared, path == "slots", pids)
					r.Reset()
					if err != nil {
						return fmt.Errorf("%d callers: %w", n, err)
					}
					res.Null = append(res.Null, m)
				}
				for _, n := range phaseCallers {
					for _, mode := range phases {
						block := min(uint32(n), blockMax)
						m, err := benchPhasesRun(ctx, r, uint32(n)/block, block, phaseIters, uint32(mode), pids)
						r.Reset()
						if err != nil {
							return fmt.Errorf("phases, %d callers, mode %d: %w", n, mode, err)
						}
						res.Phases = append(res.Phases, m)
					}
				}
				if preadPath != "" {
					if err := benchPreads(ctx, r, &f, &res, preadPath, preadCalls, preadCallers, pids); err != nil {
						return err
					}
				}
				if f.asJSON {
					return writeJSON(g.out, res)
				}
				printBench(g.out, res)
				return nil
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.IntSliceVar(&callers, "callers", []int{1, 32, 1024}, "concurrent callers of each run (see --caller)")
	fl.StringVar(&unit, "caller", "work-item", "what one caller of the null runs is: work-item (callers work-items in work-groups of up to --block-max, each calling) or warp (callers work-groups of one warp, 32 work-items, whose first work-item calls, relaxed: the warps run independently)")
	fl.IntVar(&calls, "calls", 20000, "calls per run, about (iterations = calls / callers, at least 1)")
	fl.Uint32Var(&blockMax, "block-max", 256, "work-items per work-group at most (grid = callers / block)")
	fl.IntSliceVar(&pids, "cpu-pid", nil, "host process whose CPU time counts (repeat: sluiced, the proxy, the GPU worker)")
	fl.StringVar(&label, "label", "", "a label for the result (the coalescing window, say)")
	fl.StringVar(&preadPath, "pread-path", "", "file in the volume for the pread comparison (at least --pread-calls × 4 KiB); empty: none")
	fl.IntVar(&preadCalls, "pread-calls", 16384, "4 KiB preads per pread run")
	fl.IntVar(&preadCallers, "pread-callers", 32, "concurrent callers of the pread runs (one work-group)")
	fl.IntSliceVar(&phases, "phases", nil, "diagnostic: run sluice_sys_null_phases in each of these modes (bits: 1 no lock, 2 known seq, 4 spin, 8 relaxed free, 16 no ready hint, 32 old result read; PTX only)")
	fl.StringVar(&path, "path", "ring", "how the null runs' calls reach the host: ring (the request ring, where the host reads it; else slots) or slots")
	fl.BoolVar(&shared, "shared-slots", false, "the null runs' callers take turns under the lock instead of owning their slots (the benchmark owns the VM's slots while it runs; run no other GPU program of the VM meanwhile)")
	fl.IntSliceVar(&phaseCallers, "phase-callers", []int{1, 32, 1024}, "callers of the --phases runs")
	fl.Uint32Var(&phaseIters, "phase-iterations", 50, "calls per caller of the --phases runs")
	return cmd
}

// warpSize is the work-items of a warp-caller's work-group.
const warpSize = 32

// nullShape is how a null run's callers are laid out.
type nullShape struct {
	grid, block uint32
	granularity uint8 // abi.ProgWorkItem or abi.ProgWorkGroup (relaxed)
}

// callers is how many work-items make calls.
func (s nullShape) callers() int {
	if s.granularity == abi.ProgWorkGroup {
		return int(s.grid)
	}
	return int(s.grid * s.block)
}

// benchNullRun launches the null program with flags and measures it.
func benchNullRun(ctx context.Context, r *gpucall.Runner, s nullShape, iters uint32, flags uint8, shared, slots bool, pids []int) (benchNull, error) {
	callers := s.callers()
	m := benchNull{Callers: callers, Grid: s.grid, Block: s.block, Iterations: iters, Calls: callers * int(iters), Path: "slots", Caller: "work-item"}
	if s.granularity == abi.ProgWorkGroup {
		m.Caller = "warp"
	}
	if r.Ring() && !slots {
		m.Path = "ring"
	}
	before := readCPU(pids)
	run, err := r.Null(ctx, s.grid, s.block, s.granularity, iters, gpucall.NullOptions{Flags: flags, OwnSlots: !shared, Slots: slots, Ordering: abi.ProgRelaxed})
	after := readCPU(pids)
	if err != nil {
		return m, err
	}
	m.WallS = run.Wall.Seconds()
	m.CallsPerS = float64(m.Calls) / m.WallS
	m.P50Ns, m.P99Ns, m.MaxNs = percentiles(run.RoundTrips)
	m.hostCPU = cpuDelta(before, after, m.Calls, run.Wall)
	return m, nil
}

// benchPhasesRun launches kernels.NullPhases in mode and summarises it.
func benchPhasesRun(ctx context.Context, r *gpucall.Runner, grid, block, iters, mode uint32, pids []int) (benchPhases, error) {
	callers := int(grid * block)
	m := benchPhases{Mode: mode, Callers: callers, Iterations: iters, Calls: callers * int(iters)}
	n := uint64(m.Calls) * kernels.NullPhasesRec
	out, err := r.Alloc(n)
	if err != nil {
		return m, err
	}
	spec := make([]byte, kernels.NullPhasesBlobSize-abi.ProgSpecific)
	spec[kernels.NullPhasesMode-abi.ProgSpecific] = byte(mode)
	before := readCPU(pids)
	start := time.Now()
	err = r.Launch(ctx, gpucall.Launch{
		Kernel: kernels.NullPhases, Grid: grid, Block: block, Granularity: abi.ProgWorkItem,
		Flags: abi.SysFlagBlocking, Iterations: iters, Out: out, Specific: spec,
	})
	wall := time.Since(start)
	after := readCPU(pids)
	if err != nil {
		return m, err
	}
	b, err := r.Read(out, n)
	if err != nil {
		return m, err
	}
	var claim, pop, ring, wait, free, total, polls []uint32
	first, last := ^uint64(0), uint64(0)
	step := ^uint32(0)
	for k := 0; k < m.Calls; k++ {
		rec := b[k*kernels.NullPhasesRec:]
		t0 := uint64(binary.LittleEndian.Uint32(rec)) | uint64(binary.LittleEndian.Uint32(rec[4:]))<<32
		ts := [5]uint32{binary.LittleEndian.Uint32(rec[8:]), binary.LittleEndian.Uint32(rec[12:]), binary.LittleEndian.Uint32(rec[16:]), binary.LittleEndian.Uint32(rec[20:]), binary.LittleEndian.Uint32(rec[24:])}
		prev := uint32(0)
		for _, t := range ts {
			if d := t - prev; t > prev && d < step {
				step = d
			}
			prev = t
		}
		claim = append(claim, ts[0])
		pop = append(pop, ts[1]-ts[0])
		ring = append(ring, ts[2]-ts[1])
		wait = append(wait, ts[3]-ts[2])
		free = append(free, ts[4]-ts[3])
		total = append(total, ts[4])
		polls = append(polls, binary.LittleEndian.Uint32(rec[28:]))
		first = min(first, t0)
		last = max(last, t0+uint64(ts[4]))
	}
	p50 := func(v []uint32) uint32 { x, _, _ := percentiles(v); return x }
	m.ClaimP50, m.PopulateP50, m.RingP50, m.WaitP50, m.FreeP50 = p50(claim), p50(pop), p50(ring), p50(wait), p50(free)
	m.TotalP50, m.TotalP99, _ = percentiles(total)
	m.PollsP50 = p50(polls)
	if step != ^uint32(0) {
		m.TimerStepNs = step
	}
	m.WallS = wall.Seconds()
	if last > first {
		m.GPUSpanS = float64(last-first) / 1e9
		m.GPUCallsPerS = float64(m.Calls) / m.GPUSpanS
	}
	m.hostCPU = cpuDelta(before, after, m.Calls, wall)
	return m, nil
}

// benchPreads runs the generic and the fastcall pread of 4 KiB.
func benchPreads(ctx context.Context, r *gpucall.Runner, f *gpuFlags, res *benchResult, path string, calls, callers int, pids []int) error {
	const chunk = 4096
	block := uint32(callers)
	iters := max(1, calls/callers)
	calls = iters * callers
	p, err := r.PutString(path)
	if err != nil {
		return err
	}
	fd, err := oneCall(ctx, r, abi.SysOpenat, f.context, atFDCWD, p, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	// Generic: the sweep program preads [0, calls × 4 KiB) in 4 KiB chunks.
	before := readCPU(pids)
	start := time.Now()
	bytes, failed, _, err := r.Sweep(ctx, uint32(fd), uint64(calls)*chunk, chunk, 1, block, abi.ProgWorkItem, abi.ProgStrong, f.context)
	wall := time.Since(start)
	after := readCPU(pids)
	if err != nil {
		return fmt.Errorf("generic pread: %w", err)
	}
	gen := benchPread{Kind: "generic", Callers: callers, Calls: calls, Bytes: bytes, Failed: failed,
		WallS: wall.Seconds(), CallsPerS: float64(calls) / wall.Seconds(), hostCPU: cpuDelta(before, after, calls, wall)}
	res.Pread = append(res.Pread, gen)
	if failed != 0 || bytes != uint64(calls)*chunk {
		res.Note = fmt.Sprintf("the generic sweep read %d bytes of %d (%d failed calls): is %s at least %d bytes?", bytes, calls*chunk, failed, path, calls*chunk)
	}
	// Fastcall: a curried pread numbered SysNull.
	buf, err := r.Alloc(chunk)
	if err != nil {
		return err
	}
	var num int64
	for range 2*abi.FastcallGenMask + 2 {
		if num, err = oneCall(ctx, r, abi.SysFastcallRegister, f.context, uint64(abi.SysPread64), uint64(fd), buf, chunk, 0); err != nil {
			return fmt.Errorf("registering the fastcall: %w", err)
		}
		if uint16(num) == abi.SysNull {
			break
		}
		if _, err := oneCall(ctx, r, abi.SysFastcallRevoke, f.context, uint64(num)); err != nil {
			return fmt.Errorf("revoking fastcall %#x: %w", num, err)
		}
	}
	res.FastcallNumber = uint16(num)
	if uint16(num) != abi.SysNull {
		res.Note = strings.TrimSpace(res.Note + fmt.Sprintf(" no fastcall numbered %#x could be had (got %#x): no fastcall run", abi.SysNull, num))
		return nil
	}
	// Through the slots, as the generic program's preads go: the two differ
	// in the call's path on the host alone.
	m, err := benchNullRun(ctx, r, nullShape{grid: 1, block: block, granularity: abi.ProgWorkItem}, uint32(iters), abi.SysFlagBlocking|abi.SysFlagFastcall, false, true, pids)
	if err != nil {
		// The sim's null program refuses the fastcall flag; the PTX takes it.
		res.Note = strings.TrimSpace(res.Note + " fastcall pread: " + err.Error())
		return nil
	}
	got, err := r.Read(buf, chunk)
	if err != nil {
		return err
	}
	fc := benchPread{Kind: "fastcall", Callers: callers, Calls: m.Calls, WallS: m.WallS, CallsPerS: m.CallsPerS,
		P50Ns: m.P50Ns, P99Ns: m.P99Ns, hostCPU: m.hostCPU}
	if slices.ContainsFunc(got, func(c byte) bool { return c != 0 }) {
		fc.Bytes = uint64(m.Calls) * chunk // the buffer holds the file's bytes
	}
	res.Pread = append(res.Pread, fc)
	if fc.HostCPUNsCall > 0 {
		res.GenericOverFastcallCPU = gen.HostCPUNsCall / fc.HostCPUNsCall
	}
	_, _ = oneCall(ctx, r, abi.SysFastcallRevoke, f.context, uint64(num))
	_, _ = oneCall(ctx, r, abi.SysClose, f.context, uint64(fd))
	return nil
}

// percentiles are the nearest-rank p50, p99 and the maximum.
func percentiles(v []uint32) (p50, p99, mx uint32) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p int) uint32 { return s[min(len(s)-1, (len(s)*p+99)/100-1)] }
	return at(50), at(99), s[len(s)-1]
}

// readCPU is each process's threads' run time in ns (-1 when unreadable).
func readCPU(pids []int) map[int]int64 {
	out := make(map[int]int64, len(pids))
	for _, pid := range pids {
		out[pid] = procCPU(pid)
	}
	return out
}

// procCPU sums the first field (ns on the CPU) of every thread's schedstat;
// without schedstats it falls back to utime+stime of /proc/PID/stat.
func procCPU(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	ok := false
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		fs := strings.Fields(string(b))
		if len(fs) == 0 {
			continue
		}
		if v, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
			sum += v
			ok = true
		}
	}
	if ok {
		return sum
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fs) < 13 {
		return -1
	}
	ut, _ := strconv.ParseInt(fs[11], 10, 64)
	st, _ := strconv.ParseInt(fs[12], 10, 64)
	return (ut + st) * int64(time.Second/100) // USER_HZ
}

func cpuDelta(before, after map[int]int64, calls int, wall time.Duration) hostCPU {
	var h hostCPU
	if len(before) == 0 {
		return h
	}
	h.HostCPUByPID = map[string]int64{}
	for pid, b := range before {
		a := after[pid]
		if a < 0 || b < 0 {
			continue
		}
		h.HostCPUByPID[strconv.Itoa(pid)] = a - b
		h.HostCPUNs += a - b
	}
	if calls > 0 {
		h.HostCPUNsCall = float64(h.HostCPUNs) / float64(calls)
	}
	if wall > 0 {
		h.HostCPUPerWall = float64(h.HostCPUNs) / float64(wall)
	}
	return h
}

func printBench(w io.Writer, res benchResult) {
	if res.Label != "" {
		fmt.Fprintf(w, "%s (%d slots)\n", res.Label, res.Slots)
	}
	for _, m := range res.Null {
		fmt.Fprintf(w, "null  %5d %ss (%dx%d, %-5s): %7d calls  p50 %6.1f us  p99 %7.1f us  %9.0f calls/s  host CPU %.0f ns/call\n",
			m.Callers, m.Caller, m.Grid, m.Block, m.Path, m.Calls, float64(m.P50Ns)/1e3, float64(m.P99Ns)/1e3, m.CallsPerS, m.HostCPUNsCall)
	}
	for _, p := range res.Pread {
		fmt.Fprintf(w, "pread 4 KiB %-8s %3d callers: %7d calls  %9.0f calls/s  host CPU %.0f ns/call\n",
			p.Kind, p.Callers, p.Calls, p.CallsPerS, p.HostCPUNsCall)
	}
	for _, p := range res.Phases {
		fmt.Fprintf(w, "phases mode %2d %5d callers: claim %5d  populate %5d  ring %5d  wait %6d  free %5d  total p50 %6d p99 %7d ns  polls %d  step %d ns  %9.0f calls/s (GPU span)\n",
			p.Mode, p.Callers, p.ClaimP50, p.PopulateP50, p.RingP50, p.WaitP50, p.FreeP50, p.TotalP50, p.TotalP99, p.PollsP50, p.TimerStepNs, p.GPUCallsPerS)
	}
	if res.GenericOverFastcallCPU > 0 {
		fmt.Fprintf(w, "host CPU per call, generic / fastcall: %.2f\n", res.GenericOverFastcallCPU)
	}
	if res.Note != "" {
		fmt.Fprintln(w, "note:", res.Note)
	}
}
