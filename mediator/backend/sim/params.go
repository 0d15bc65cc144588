package sim

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

// Params are the sim's cost model and options. Each field names the key of
// backend.Options.Params that sets it and its default. A length of time is a
// Go duration ("cmd", "memset", "copy", "spin", "timeslice": 2ms); its old
// key KEY_ns, in nanoseconds ("2000000" or "2M"), still works, and giving
// both is an error.
type Params struct {
	// CmdNs is what NOP, FENCE, ALLOC and FREE take ("cmd", default 1us;
	// 0 is allowed).
	CmdNs int64
	// MemsetNs and MemsetBW: a MEMSET takes MemsetNs plus its length at
	// MemsetBW bytes per second ("memset", default 1us; "memset_bw",
	// default 1T, device memory).
	MemsetNs int64
	MemsetBW uint64
	// CopyNs and CopyBW: a COPY takes CopyNs plus its length at CopyBW bytes
	// per second, whatever its direction ("copy", default 2us;
	// "copy_bw", default 25G, PCIe).
	CopyNs int64
	CopyBW uint64
	// Memory is the device memory ALLOC draws from, in bytes ("memory",
	// default 1Gi).
	Memory uint64
	// Drive is "loop" (a backend goroutine runs the timeline) or "manual"
	// (the caller does, with Run; virtual clock only) ("drive", default
	// "loop").
	Drive string
	// SpinNs: with the wall clock, the backend goroutine sleeps on a timer
	// until SpinNs before the next event, then spins ("spin", default 0:
	// never spin).
	SpinNs int64
	// Resident is how many work-items of a program are resident at once
	// ("resident", default 1024, at least 1): the grid runs in waves of
	// work-groups that fit, and a work-group larger than this cannot
	// launch.
	Resident int
	// TimesliceNs makes the compute engine time-slice between VMs, as a
	// GPU's driver does between contexts with compute preemption
	// ("timeslice", default 0: commands are not preemptible, the GPU of
	// the LoGA paper): a command that has run TimesliceNs while a command
	// of another VM waits for the engine is preempted, goes to the back of
	// the engine's FIFO with what it has left, and resumes there. Commands
	// of one VM never preempt each other, and programs (LAUNCH) and data
	// movement (MEMSET, COPY) are not preempted.
	TimesliceNs int64
}

// Drive modes.
const (
	DriveLoop   = "loop"
	DriveManual = "manual"
)

// DefaultParams is the cost model without options.
func DefaultParams() Params {
	return Params{
		CmdNs:    1000,
		MemsetNs: 1000,
		MemsetBW: 1e12,
		CopyNs:   2000,
		CopyBW:   25e9,
		Memory:   1 << 30,
		Drive:    DriveLoop,
		Resident: 1024,
	}
}

// maxCost bounds any one command's cost so that start+cost never overflows.
const maxCost = int64(1) << 60

// durationKeys are the keys of lengths of time and the fields they set;
// each also has its old key, KEY_ns.
var durationKeys = map[string]func(p *Params) *int64{
	"cmd":       func(p *Params) *int64 { return &p.CmdNs },
	"memset":    func(p *Params) *int64 { return &p.MemsetNs },
	"copy":      func(p *Params) *int64 { return &p.CopyNs },
	"spin":      func(p *Params) *int64 { return &p.SpinNs },
	"timeslice": func(p *Params) *int64 { return &p.TimesliceNs },
}

// paramSetters is the table of keys; each parses its value into p.
var paramSetters = func() map[string]func(p *Params, v string) error {
	m := map[string]func(p *Params, v string) error{
		"memset_bw": func(p *Params, v string) error { return parseBandwidth(v, &p.MemsetBW) },
		"copy_bw":   func(p *Params, v string) error { return parseBandwidth(v, &p.CopyBW) },
		"memory":    func(p *Params, v string) error { return parseQuantity(v, &p.Memory) },
		"resident":  parseResident,
		"drive":     parseDrive,
	}
	for k, field := range durationKeys {
		m[k] = func(p *Params, v string) error { return parseDuration(v, field(p)) }
		m[k+"_ns"] = func(p *Params, v string) error { return parseNs(v, field(p)) }
	}
	return m
}()

func parseResident(p *Params, v string) error {
	var q uint64
	if err := parseQuantity(v, &q); err != nil {
		return err
	}
	if q == 0 || q > 1<<30 {
		return fmt.Errorf("want 1..2^30 work-items")
	}
	p.Resident = int(q)
	return nil
}

func parseDrive(p *Params, v string) error {
	if v != DriveLoop && v != DriveManual {
		return fmt.Errorf("want %q or %q", DriveLoop, DriveManual)
	}
	p.Drive = v
	return nil
}

// ParseParams applies the keys of m to the defaults. An unknown key or a bad
// value is an error wrapping backend.ErrInvalid that names the key.
func ParseParams(m map[string]string) (Params, error) {
	p := DefaultParams()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key reported does not depend on map order
	for _, k := range keys {
		if _, both := m[k+"_ns"]; both && durationKeys[k] != nil {
			return Params{}, fmt.Errorf("sim params %q and %q: %w: the same setting (%s_ns is its old name)", k, k+"_ns", backend.ErrInvalid, k)
		}
	}
	for _, k := range keys {
		set, ok := paramSetters[k]
		if !ok {
			return Params{}, fmt.Errorf("sim param %q: %w: unknown key", k, backend.ErrInvalid)
		}
		if err := set(&p, m[k]); err != nil {
			return Params{}, fmt.Errorf("sim param %q=%q: %w: %v", k, m[k], backend.ErrInvalid, err)
		}
	}
	return p, nil
}

// parseDuration reads a Go duration from 0 to maxCost.
func parseDuration(v string, dst *int64) error {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return fmt.Errorf("want a duration such as 2ms: %w", err)
	case d < 0 || int64(d) > maxCost:
		return fmt.Errorf("want a duration from 0 to %v", time.Duration(maxCost))
	}
	*dst = int64(d)
	return nil
}

func parseNs(v string, dst *int64) error {
	var q uint64
	if err := parseQuantity(v, &q); err != nil {
		return err
	}
	if q > uint64(maxCost) {
		return fmt.Errorf("more than %d ns", maxCost)
	}
	*dst = int64(q)
	return nil
}

func parseBandwidth(v string, dst *uint64) error {
	if err := parseQuantity(v, dst); err != nil {
		return err
	}
	if *dst == 0 {
		return fmt.Errorf("bandwidth must be positive")
	}
	return nil
}

// quantitySuffixes: decimal (k, M, G, T) and binary (Ki, Mi, Gi, Ti)
// multipliers; binary first so "Gi" is not read as "G".
var quantitySuffixes = []struct {
	s string
	m float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// parseQuantity reads a non-negative integer, optionally a decimal number
// with a suffix ("25G", "1.5Gi", "2e9"), whose value is a whole number below
// 2^63.
func parseQuantity(v string, dst *uint64) error {
	num, mult := v, 1.0
	for _, sf := range quantitySuffixes {
		if strings.HasSuffix(v, sf.s) {
			num, mult = strings.TrimSuffix(v, sf.s), sf.m
			break
		}
	}
	if u, err := strconv.ParseUint(num, 10, 63); err == nil && mult == 1 {
		*dst = u
		return nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return fmt.Errorf("not a number")
	}
	f *= mult
	if math.IsNaN(f) || f < 0 || f >= 1<<63 || f != math.Trunc(f) {
		return fmt.Errorf("not a whole number in [0, 2^63)")
	}
	*dst = uint64(f)
	return nil
}

// Cost is how long cmd occupies its engine, in ns.
func (p *Params) Cost(cmd *abi.Command) int64 {
	switch cmd.Op {
	case abi.OpThrottle:
		return min(int64(min(cmd.DurationNs, uint64(maxCost))), maxCost)
	case abi.OpMemset:
		return min(p.MemsetNs+transferNs(cmd.Length, p.MemsetBW), maxCost)
	case abi.OpCopy:
		return min(p.CopyNs+transferNs(cmd.Length, p.CopyBW), maxCost)
	default:
		return p.CmdNs
	}
}

// transferNs is ceil(n bytes / bw bytes per second) in ns, without overflow.
func transferNs(n, bw uint64) int64 {
	if n == 0 {
		return 0
	}
	hi, lo := bits.Mul64(n, 1e9)
	if hi >= bw {
		return maxCost
	}
	q, r := bits.Div64(hi, lo, bw)
	if r != 0 {
		q++
	}
	return int64(min(q, uint64(maxCost)))
}
