package spec

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-gpu/sluice/internal/limitread"
)

// Backend names the backend that runs the VMs' work.
type Backend string

// Backends.
const (
	BackendSim  Backend = "sim"
	BackendCUDA Backend = "cuda"
)

// Clock names the clock the sim backend runs on.
type Clock string

// Clocks.
const (
	ClockVirtual Clock = "virtual"
	ClockWall    Clock = "wall"
)

// Policy names the scheduling policy (docs/architecture.md, "Accounting and scheduling").
type Policy string

// Policies.
const (
	PolicyNone      Policy = "none"
	PolicyDFQ       Policy = "dfq"
	PolicyCap       Policy = "cap"
	PolicyTimeslice Policy = "timeslice"
)

// Accounting names the accounting method (docs/architecture.md, "Accounting and scheduling"); the last three are baselines for comparison.
type Accounting string

// Accounting methods.
const (
	AccountingLoGA               Accounting = "loga"
	AccountingLoGASegmentAverage Accounting = "loga-segment-average"
	AccountingNEONSampling       Accounting = "neon-sampling"
	AccountingOff                Accounting = "off"
)

// Kind names a workload kind.
type Kind string

// Workload kinds.
const (
	KindThrottle Kind = "throttle"
	KindApp      Kind = "app"
)

var (
	backends    = []Backend{BackendSim, BackendCUDA}
	clocks      = []Clock{ClockVirtual, ClockWall}
	policies    = []Policy{PolicyNone, PolicyDFQ, PolicyCap, PolicyTimeslice}
	accountings = []Accounting{AccountingLoGA, AccountingLoGASegmentAverage, AccountingNEONSampling, AccountingOff}
	kinds       = []Kind{KindThrottle, KindApp}
)

// Limits on values. They keep derived quantities (kernels × kernel_us in nanoseconds) inside an int64.
const (
	MaxWeight        = 1_000_000
	MaxChannels      = 64
	MaxCount         = 1024
	MaxVMs           = 4096 // after expanding count
	MaxKernelUS      = 10_000_000
	MaxSleepUS       = 3_600_000_000
	MaxKernels       = 100_000_000
	MaxDuration      = 24 * time.Hour
	MaxDepth         = 4096
	MaxWindow        = time.Second      // tuning.neon_window
	MaxRatio         = 10_000           // tuning.poll_ratio, tuning.idle_factor and tuning.neon_freerun_ratio
	MaxWindowRecords = 1 << 20          // tuning.window
	MaxBudget        = time.Hour        // tuning.inflight_budget
	MaxQuantum       = time.Minute      // tuning.quantum
	MaxHandoff       = time.Millisecond // tuning.handoff (gate.MaxHandoff)
	MaxSimTimeslice  = time.Second      // tuning.sim_timeslice
)

// Defaults for keys left out.
const (
	DefaultBackend    = BackendSim
	DefaultClock      = ClockVirtual
	DefaultPolicy     = PolicyDFQ
	DefaultAccounting = AccountingLoGA
	DefaultSeed       = 1
	DefaultWeight     = 1
	DefaultChannels   = 1
	DefaultCount      = 1
)

// Spec is one benchmark run. The package comment describes each field.
type Spec struct {
	Backend    Backend       `yaml:"backend"`
	Clock      Clock         `yaml:"clock"`
	Policy     Policy        `yaml:"policy"`
	Accounting Accounting    `yaml:"accounting"`
	Duration   time.Duration `yaml:"duration,omitempty"`
	Seed       int64         `yaml:"seed"`
	Tuning     Tuning        `yaml:"tuning,omitempty"`
	VMs        []VM          `yaml:"vms"`
}

// Tuning overrides the accounting methods' defaults. Zero values mean the defaults.
type Tuning struct {
	PollRatio        float64       `yaml:"poll_ratio,omitempty"`         // -1: poll all the time
	IdleFactor       float64       `yaml:"idle_factor,omitempty"`        // 0: accounting's default
	NeonWindow       time.Duration `yaml:"neon_window,omitempty"`        // 0: 2ms
	NeonFreerunRatio float64       `yaml:"neon_freerun_ratio,omitempty"` // 0: 5
	// Window is how many records a channel keeps forwarded and not
	// completed (0: the mediator's default, -1: no bound).
	Window int `yaml:"window,omitempty"`
	// InflightBudget is the estimated GPU time a VM keeps forwarded and not
	// completed (0: the mediator's default, derived from the period;
	// negative: no bound).
	InflightBudget time.Duration `yaml:"inflight_budget,omitempty"`
	// Arbitration is who decides whose work is on the GPU: "driver" (every
	// VM's at once), "turns" (one VM at a time) or "auto" (turns while at
	// least two VMs are backlogged, driver otherwise); "": the default
	// (Spec.Arbitration).
	Arbitration string `yaml:"arbitration,omitempty"`
	// Quantum is how long a turn lasts while another VM waits (0: the
	// mediator's default).
	Quantum time.Duration `yaml:"quantum,omitempty"`
	// Handoff is the turns' hand-off threshold (0: the mediator's
	// default; negative: off).
	Handoff time.Duration `yaml:"handoff,omitempty"`
	// SimTimeslice makes the sim's compute engine time-slice between VMs,
	// as a GPU's driver does between contexts (backend sim only; 0: its
	// commands are not preempted).
	SimTimeslice time.Duration `yaml:"sim_timeslice,omitempty"`
}

// VM is one VM of a spec, or Count identical ones.
type VM struct {
	Name     string   `yaml:"name"`
	Weight   uint32   `yaml:"weight"`
	Cap      float64  `yaml:"cap,omitempty"` // 0: none
	Channels int      `yaml:"channels"`
	Count    int      `yaml:"count"`
	Workload Workload `yaml:"workload"`
}

// Workload is what a VM runs.
type Workload struct {
	Kind     Kind  `yaml:"kind"`
	Kernels  int64 `yaml:"kernels,omitempty"` // app only
	KernelUS int64 `yaml:"kernel_us"`
	SleepUS  int64 `yaml:"sleep_us"`
	Depth    int   `yaml:"depth,omitempty"` // 0: 1
	// Start delays the first kernel; On and Off (both or neither) make the workload bursty.
	Start time.Duration `yaml:"start,omitempty"`
	On    time.Duration `yaml:"on,omitempty"`
	Off   time.Duration `yaml:"off,omitempty"`
}

// InFlight is how many kernels the workload keeps in flight: Depth, at least 1.
func (w Workload) InFlight() int { return max(w.Depth, 1) }

// Arbitration is the arbitration the spec runs under: the one its tuning
// names, or the mediator's default (the engine's DefaultFor, which the
// bench's tests hold this to): auto where a policy that shares the GPU
// (dfq, cap) runs on LoGA's accounting, driver elsewhere (policy none or
// timeslice; accounting off or NEON's sampling, which arbitrate nothing).
// Not a default WithDefaults fills in: a spec that names none is written
// back naming none.
func (s Spec) Arbitration() string {
	if s.Tuning.Arbitration != "" {
		return s.Tuning.Arbitration
	}
	p, a := s.Policy, s.Accounting
	if p == "" {
		p = DefaultPolicy
	}
	if a == "" {
		a = DefaultAccounting
	}
	if (p == PolicyDFQ || p == PolicyCap) && (a == AccountingLoGA || a == AccountingLoGASegmentAverage) {
		return "auto"
	}
	return "driver"
}

// WithDefaults returns s with defaults in place of zero values: empty backend, clock, policy and accounting, and
// zero weight, channels and count. Seed is left alone because 0 is a valid seed. The VMs are copied.
func (s Spec) WithDefaults() Spec {
	if s.Backend == "" {
		s.Backend = DefaultBackend
	}
	if s.Clock == "" {
		s.Clock = DefaultClock
	}
	if s.Policy == "" {
		s.Policy = DefaultPolicy
	}
	if s.Accounting == "" {
		s.Accounting = DefaultAccounting
	}
	if s.VMs != nil {
		s.VMs = append([]VM(nil), s.VMs...)
	}
	for i := range s.VMs {
		vm := &s.VMs[i]
		if vm.Weight == 0 {
			vm.Weight = DefaultWeight
		}
		if vm.Channels == 0 {
			vm.Channels = DefaultChannels
		}
		if vm.Count == 0 {
			vm.Count = DefaultCount
		}
	}
	return s
}

// Expand returns the VMs with count replicated: count N > 1 gives N VMs named name-0 … name-(N-1), each with
// Count 1; count 1 (or 0) keeps the plain name. It assumes s is valid (see Validate, which also checks that the
// expanded names are unique).
func (s Spec) Expand() []VM {
	var out []VM
	for _, vm := range s.VMs {
		if vm.Count <= 1 {
			vm.Count = 1
			out = append(out, vm)
			continue
		}
		base := vm.Name
		for i := range vm.Count {
			vm.Name = expandedName(base, i)
			vm.Count = 1
			out = append(out, vm)
		}
	}
	return out
}

func expandedName(base string, i int) string { return base + "-" + strconv.Itoa(i) }

// Warnings lists settings that are valid but have no effect, for tools to print.
func (s Spec) Warnings() []string {
	var w []string
	for i, vm := range s.VMs {
		if vm.Cap != 0 && s.Policy != PolicyCap {
			w = append(w, fmt.Sprintf("vms[%d].cap: ignored under policy %s (applies to policy cap)", i, s.Policy))
		}
	}
	if s.Duration != 0 && !s.hasThrottle() {
		w = append(w, "duration: ignored, no VM has a throttle workload (app VMs run to completion)")
	}
	return w
}

func (s Spec) hasThrottle() bool {
	for _, vm := range s.VMs {
		if vm.Workload.Kind == KindThrottle {
			return true
		}
	}
	return false
}

// MaxFileSize bounds a spec file: the checked-in ones are a few KiB, and a
// path like /dev/zero must not be read until memory runs out.
const MaxFileSize = 1 << 20

// Load reads and parses the spec file at path, refusing one past
// MaxFileSize.
func Load(path string) (Spec, error) {
	data, err := limitread.File(path, MaxFileSize)
	if errors.Is(err, limitread.ErrTooLarge) {
		return Spec{}, fmt.Errorf("loading spec: %w: %w", err, ErrInvalid)
	}
	if err != nil {
		return Spec{}, fmt.Errorf("loading spec: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return Spec{}, fmt.Errorf("loading spec %s: %w", path, err)
	}
	return s, nil
}

// Marshal returns the canonical YAML of s.WithDefaults(), which Parse reads back to the same Spec. It fails with
// ErrInvalid when that spec is not valid.
func Marshal(s Spec) ([]byte, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("marshaling spec: %w", err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("marshaling spec: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshaling spec: %w", err)
	}
	return buf.Bytes(), nil
}
