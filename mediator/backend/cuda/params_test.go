package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// TestGapOption: the THROTTLE kernel's gap is a duration ("gap"); its old
// key gap_ns, in nanoseconds, still sets it; both at once, a bare number or
// zero is refused.
func TestGapOption(t *testing.T) {
	for _, params := range []map[string]string{{"gap": "5us"}, {"gap_ns": "5000"}} {
		b, err := open(newFake(), backend.Options{Params: params}, nil)
		if err != nil {
			t.Fatalf("%v: %v", params, err)
		}
		if b.gap != 5000 {
			t.Errorf("%v: gap %d ns, want 5000", params, b.gap)
		}
		_ = b.Close()
	}
	for _, params := range []map[string]string{{"gap": "5000"}, {"gap": "0s"}, {"gap": "5us", "gap_ns": "5000"}} {
		_, err := open(newFake(), backend.Options{Params: params}, nil)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), "gap") {
			t.Errorf("%v: %v, want ErrInvalid naming gap", params, err)
		}
	}
}
