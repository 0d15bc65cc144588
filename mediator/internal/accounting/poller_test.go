package accounting

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/backend/sim"
)

func TestConfigValidate(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{Method: MethodLoga, PollNs: 500 * us, MinPollNs: 200 * us, MaxPollNs: 20_000 * us,
		Ratio: 51, SampleNs: 2 * us, Jitter: 0.25, IdleFactor: 10}
	if c != want {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
	again := c
	if err := again.Validate(); err != nil || again != c {
		t.Errorf("Validate is not idempotent: %+v, %v", again, err)
	}
	neg := Config{Ratio: -1, Jitter: -1}
	if err := neg.Validate(); err != nil || neg.Ratio != -1 || neg.Jitter != -1 {
		t.Errorf("negative Ratio and Jitter (none) must stay: %+v, %v", neg, err)
	}
	bad := []struct {
		name string
		c    Config
		is   error
	}{
		{"unknown method", Config{Method: "fast"}, ErrUnknownMethod},
		{"neon sampling", Config{Method: MethodNeonSampling}, ErrNotEstimator},
		{"negative poll", Config{PollNs: -1}, ErrInvalidConfig},
		{"negative sample", Config{SampleNs: -1}, ErrInvalidConfig},
		{"min above max", Config{MinPollNs: 2e6, MaxPollNs: 1e6}, ErrInvalidConfig},
		{"sample above min poll", Config{SampleNs: 300 * us}, ErrInvalidConfig},
		{"jitter 1", Config{Jitter: 1}, ErrInvalidConfig},
		{"jitter NaN", Config{Jitter: math.NaN()}, ErrInvalidConfig},
		{"ratio Inf", Config{Ratio: math.Inf(1)}, ErrInvalidConfig},
		{"idle factor below 1", Config{IdleFactor: 0.5}, ErrInvalidConfig},
		{"period too long", Config{Ratio: 1e9}, ErrInvalidConfig},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Validate(); !errors.Is(err, tc.is) {
				t.Errorf("Validate: %v, want %v", err, tc.is)
			}
		})
	}
}

func TestMeanLengths(t *testing.T) {
	c := Config{}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		channels int
		want     int64
	}{{0, 500 * us}, {1, 500 * us}, {3, 1500 * us}, {40, 20_000 * us}, {math.MaxInt32, 20_000 * us}} {
		if got := c.meanPollNs(tc.channels); got != tc.want {
			t.Errorf("meanPollNs(%d) = %d, want %d", tc.channels, got, tc.want)
		}
	}
	small := Config{PollNs: 100 * us}
	if err := small.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := small.meanPollNs(1); got != 200*us {
		t.Errorf("meanPollNs below the minimum = %d, want it clamped to 200 µs", got)
	}
	if got := c.meanNonPollNs(500*us, 2); got != DefaultRatio*500*us {
		t.Errorf("busy non-poll = %d, want %d", got, DefaultRatio*500*us)
	}
	if got := c.meanNonPollNs(500*us, 1); got != 10*(DefaultRatio+1)*500*us-500*us {
		t.Errorf("idle non-poll = %d, want the period ×10", got)
	}
}

func TestJitterBoundsAndDeterminism(t *testing.T) {
	draw := func(seed int64) []int64 {
		p, err := newPoller(Config{Seed: seed}, nullReader{}, func(Period) {})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int64, 10000)
		for i := range out {
			out[i] = p.jittered(1_000_000)
		}
		return out
	}
	a, b, c := draw(1), draw(1), draw(2)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave different lengths")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("different seeds gave the same lengths")
	}
	var sum, lo, hi int64 = 0, math.MaxInt64, 0
	for _, v := range a {
		sum += v
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo < 750_000 || hi > 1_250_000 {
		t.Errorf("lengths in [%d, %d], want within ±25%% of 1000000", lo, hi)
	}
	if lo > 760_000 || hi < 1_240_000 {
		t.Errorf("lengths in [%d, %d]: not spread over ±25%%", lo, hi)
	}
	if mean := sum / int64(len(a)); mean < 990_000 || mean > 1_010_000 {
		t.Errorf("mean %d, want about 1000000", mean)
	}
}

// periodsOf runs a virtual poller for dur over a workload and returns its
// periods.
func periodsOf(t *testing.T, cfg Config, dur int64, workload func(*sim.Sim)) []Period {
	t.Helper()
	s := newManualSim(t)
	workload(s)
	var out []Period
	p, err := NewVirtual(cfg, s, s.After, func(per Period) { out = append(out, per) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := s.Run(dur); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVirtualPhaseLengths(t *testing.T) {
	twoVMs := func(s *sim.Sim) {
		closedLoop(t, s, 1, 100*us, 0, 0)
		closedLoop(t, s, 2, 300*us, 0, 0)
	}
	ps := periodsOf(t, Config{Seed: 7}, second, twoVMs)
	if len(ps) < 10 {
		t.Fatalf("%d periods in 1 s", len(ps))
	}
	for i, p := range ps {
		mean := int64(500 * us) // the first phase assumes one channel
		if i > 0 {
			mean = 1000 * us // two channels seen active
		}
		if p.PollNs() < mean*3/4 || p.PollNs() > mean*5/4 {
			t.Errorf("period %d: poll %d, want %d ± 25%%", i, p.PollNs(), mean)
		}
		if np := DefaultRatio * 1000 * us; p.Idle || p.NextNonPollNs() < int64(np)*3/4 || p.NextNonPollNs() > int64(np)*5/4 {
			t.Errorf("period %d: next non-poll %d (idle %v), want %d ± 25%%", i, p.NextNonPollNs(), p.Idle, np)
		}
		if i > 0 && p.Start != ps[i-1].End {
			t.Errorf("period %d starts at %d, previous ended at %d", i, p.Start, ps[i-1].End)
		}
		if len(p.Phase.Active) != 2 || p.Phase.Channels != 2 {
			t.Errorf("period %d: active %v, %d channels", i, p.Phase.Active, p.Phase.Channels)
		}
		var share float64
		for vm, b := range p.Busy {
			if want := int64(float64(p.Phase.Busy[vm]) * float64(p.End-p.Start) / float64(p.PollNs())); b != want {
				t.Errorf("period %d VM %d: Busy %d, want %d", i, vm, b, want)
			}
			share += p.Share[vm]
		}
		if math.Abs(share-1) > 1e-9 {
			t.Errorf("period %d: shares add up to %v on a saturated GPU", i, share)
		}
	}
	again := periodsOf(t, Config{Seed: 7}, second, twoVMs)
	if !reflect.DeepEqual(ps, again) {
		t.Error("the same seed gave different periods")
	}
	other := periodsOf(t, Config{Seed: 8}, second, twoVMs)
	if len(other) > 0 && other[0].End == ps[0].End {
		t.Error("another seed gave the same first period")
	}
}

func TestIdleFactor(t *testing.T) {
	cfg := Config{Jitter: -1}
	for _, tc := range []struct {
		name     string
		workload func(*testing.T, *sim.Sim)
		idle     bool
		period   int64
	}{
		{"no VM", func(*testing.T, *sim.Sim) {}, true, 10 * (DefaultRatio + 1) * 500 * us},
		{"one VM", func(t *testing.T, s *sim.Sim) { closedLoop(t, s, 1, 100*us, 0, 0) }, true, 10 * (DefaultRatio + 1) * 500 * us},
		{"two VMs", func(t *testing.T, s *sim.Sim) {
			closedLoop(t, s, 1, 100*us, 0, 0)
			closedLoop(t, s, 2, 100*us, 0, 0)
		}, false, (DefaultRatio + 1) * 1000 * us},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := periodsOf(t, cfg, second, func(s *sim.Sim) { tc.workload(t, s) })
			if len(ps) < 2 {
				t.Fatalf("%d periods", len(ps))
			}
			for i, p := range ps[1:] {
				if p.Idle != tc.idle || p.End-p.Start != tc.period {
					t.Errorf("period %d: idle %v, length %d; want %v, %d", i+1, p.Idle, p.End-p.Start, tc.idle, tc.period)
				}
			}
		})
	}
}

func TestVirtualOffAndStop(t *testing.T) {
	s := newManualSim(t)
	closedLoop(t, s, 1, 100*us, 0, 0)
	closedLoop(t, s, 2, 100*us, 0, 0)
	reads := &countingReader{r: s}
	var ps []Period
	var p *Poller
	p, err := NewVirtual(Config{Method: MethodOff}, reads, s.After, func(per Period) {
		ps = append(ps, per)
		if len(ps) == 3 {
			p.Stop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(10 * second); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || p.Periods() != 3 {
		t.Fatalf("%d periods reported after Stop at the third", len(ps))
	}
	if reads.n != 10 {
		t.Errorf("off read the status %d times in 3 periods, want 1 to start and 3 per period (poll start, end, period end)", reads.n)
	}
	for _, per := range ps {
		if len(per.Busy) != 0 || len(per.Phase.Active) != 0 {
			t.Errorf("off charged %v, active %v", per.Busy, per.Phase.Active)
		}
	}
}

type nullReader struct{}

func (nullReader) ReadStatus(*backend.Status) {}

type countingReader struct {
	r backend.StatusReader
	n int
}

func (c *countingReader) ReadStatus(st *backend.Status) { c.n++; c.r.ReadStatus(st) }

func TestNewPollerErrors(t *testing.T) {
	s := newManualSim(t)
	nop := func(Period) {}
	if _, err := NewVirtual(Config{Jitter: 2}, s, s.After, nop); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad config: %v", err)
	}
	if _, err := NewVirtual(Config{}, nil, s.After, nop); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil reader: %v", err)
	}
	if _, err := NewVirtual(Config{}, s, nil, nop); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil after: %v", err)
	}
	if _, err := NewWall(Config{}, s, nil, nop); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil clock: %v", err)
	}
	p, err := NewVirtual(Config{}, s, s.After, nop)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if err := p.Run(t.Context()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Run on a virtual poller: %v", err)
	}
}

// TestPollPhaseOffsetIsUniform checks the poll phase's position inside its
// period: drawn uniformly over it, so that it samples the whole period and
// not only its end (which follows the scheduler's decision).
func TestPollPhaseOffsetIsUniform(t *testing.T) {
	ps := periodsOf(t, Config{Seed: 3}, 20*second, func(s *sim.Sim) {
		closedLoop(t, s, 1, 100*us, 0, 0)
		closedLoop(t, s, 2, 300*us, 0, 0)
	})
	if len(ps) < 300 {
		t.Fatalf("%d periods in 20 s", len(ps))
	}
	var quarters [4]int
	var sum float64
	for i, p := range ps {
		slack := p.End - p.Start - p.PollNs()
		off := p.Phase.Start - p.Start
		if off < 0 || off > slack {
			t.Fatalf("period %d: poll phase at offset %d, slack %d", i, off, slack)
		}
		x := float64(off) / float64(slack)
		sum += x
		quarters[min(int(4*x), 3)]++
	}
	mean := sum / float64(len(ps))
	if mean < 0.45 || mean > 0.55 {
		t.Errorf("mean offset %.3f of the slack, want about 0.5", mean)
	}
	for q, n := range quarters {
		if n < len(ps)/6 {
			t.Errorf("quarter %d of the period holds %d of %d poll phases", q, n, len(ps))
		}
	}
}
