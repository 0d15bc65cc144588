package accounting

import (
	"errors"
	"fmt"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// Method names an accounting method.
type Method string

// The methods.
const (
	MethodLoga           Method = "loga"
	MethodSegmentAverage Method = "loga-segment-average"
	MethodOff            Method = "off"
	// MethodNeonSampling is NEON's sampling (each VM alone in turn): a
	// control mode implemented elsewhere, not an estimator of this package.
	MethodNeonSampling Method = "neon-sampling"
)

// Sentinel errors of this package.
var (
	ErrUnknownMethod = errors.New("unknown accounting method")
	ErrNotEstimator  = errors.New("accounting method is not an estimator")
	ErrInvalidConfig = errors.New("invalid accounting config")
)

// ParseMethod checks s names a method.
func ParseMethod(s string) (Method, error) {
	switch m := Method(s); m {
	case MethodLoga, MethodSegmentAverage, MethodOff, MethodNeonSampling:
		return m, nil
	}
	return "", fmt.Errorf("parsing accounting method %q: %w (want %q, %q, %q or %q)", s, ErrUnknownMethod,
		MethodLoga, MethodSegmentAverage, MethodOff, MethodNeonSampling)
}

// Estimator turns the status samples of one poll phase into GPU time per VM.
// It is not safe for concurrent use; one estimator measures one phase at a
// time, and is reused phase after phase.
type Estimator interface {
	// Begin starts a poll phase at t, forgetting the previous one.
	Begin(t int64)
	// Observe takes one status sample. Times must increase strictly within
	// a phase; a sample that does not advance time is ignored. The
	// estimator does not keep st.
	Observe(st *backend.Status)
	// End ends the phase at t (at least the last sample's time) and returns
	// its measurement.
	End(t int64) Phase
}

// Phase is the measurement of one poll phase.
type Phase struct {
	Start, End int64
	// Busy is the GPU time charged to each VM inside [Start, End]; VMs
	// charged nothing are absent.
	Busy map[uint32]int64
	// Active: VMs whose channels were active (queued or running) in any
	// sample.
	Active map[uint32]bool
	// Channels is how many distinct channels were active in any sample.
	Channels int
	Samples  int
}

// Total is the GPU time charged to all VMs.
func (p *Phase) Total() int64 {
	var t int64
	for _, b := range p.Busy {
		t += b
	}
	return t
}

// NewEstimator returns a fresh estimator for m.
func NewEstimator(m Method) (Estimator, error) {
	switch m {
	case MethodLoga:
		return newLoga(), nil
	case MethodSegmentAverage:
		return newSegAvg(), nil
	case MethodOff:
		return &off{}, nil
	case MethodNeonSampling:
		return nil, fmt.Errorf("estimator for %q: %w", m, ErrNotEstimator)
	}
	return nil, fmt.Errorf("estimator for %q: %w", m, ErrUnknownMethod)
}

// off charges nothing and remembers nothing.
type off struct{ start int64 }

func (o *off) Begin(t int64)           { o.start = t }
func (o *off) Observe(*backend.Status) {}
func (o *off) End(t int64) Phase {
	return Phase{Start: o.start, End: max(t, o.start), Busy: map[uint32]int64{}, Active: map[uint32]bool{}}
}
