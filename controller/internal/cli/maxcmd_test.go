package cli

import "testing"

func TestMaxCommandValue(t *testing.T) {
	var ns int64 = 7
	v := maxCommandValue{&ns}
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"250ms", 250e6, true},
		{"2s", 2e9, true},
		{"default", 0, true},
		{" Default ", 0, true},
		{"0", 0, false},
		{"-1s", 0, false},
		{"soon", 0, false},
	} {
		ns = 7
		err := v.Set(tc.in)
		if (err == nil) != tc.ok || tc.ok && ns != tc.want {
			t.Errorf("Set(%q): %d, %v; want %d, ok %v", tc.in, ns, err, tc.want, tc.ok)
		}
	}
}

func TestMaxCommandField(t *testing.T) {
	for _, tc := range []struct {
		ns, timeouts int64
		want         string
	}{
		{500e6, 0, "500ms"},
		{250e6, 1, "250ms, 1 command ran past it (the VM's GPU work was ended)"},
		{2e9, 3, "2s, 3 commands ran past it (the VM's GPU work was ended each time)"},
	} {
		if got := maxCommandField(tc.ns, tc.timeouts); got != tc.want {
			t.Errorf("maxCommandField(%d, %d) = %q, want %q", tc.ns, tc.timeouts, got, tc.want)
		}
	}
}
