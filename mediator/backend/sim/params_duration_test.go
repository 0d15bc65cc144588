package sim

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/backend"
)

// TestParamsDurations: the lengths of time are Go durations; their old
// KEY_ns spellings still set the same fields; both at once, a bare number
// or a negative one is refused naming the key.
func TestParamsDurations(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]string
		want func(*Params)
	}{
		{map[string]string{"cmd": "0s", "copy": "1us"}, func(p *Params) { p.CmdNs, p.CopyNs = 0, 1000 }},
		{map[string]string{"memset": "40us", "spin": "20us"}, func(p *Params) { p.MemsetNs, p.SpinNs = 40000, 20000 }},
		{map[string]string{"timeslice": "2ms"}, func(p *Params) { p.TimesliceNs = 2e6 }},
		{map[string]string{"timeslice_ns": "2000000"}, func(p *Params) { p.TimesliceNs = 2e6 }},
	} {
		got, err := ParseParams(tc.in)
		want := DefaultParams()
		tc.want(&want)
		if err != nil || got != want {
			t.Errorf("%v: %+v, %v; want %+v", tc.in, got, err, want)
		}
	}
	for _, tc := range []struct {
		in   map[string]string
		want string
	}{
		{map[string]string{"timeslice": "2000000"}, `"timeslice"`},
		{map[string]string{"cmd": "-1us"}, `"cmd"`},
		{map[string]string{"spin": "fast"}, `"spin"`},
		{map[string]string{"copy": "1us", "copy_ns": "1000"}, `"copy" and "copy_ns"`},
	} {
		_, err := ParseParams(tc.in)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want ErrInvalid naming %s", tc.in, err, tc.want)
		}
	}
}
