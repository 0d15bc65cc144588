package cli

import "testing"

func TestShortDuration(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want string
	}{
		{-1, "0"}, {0, "0"}, {1, "0µs"}, {499, "0µs"}, {500, "1µs"}, {999_499, "999µs"},
		{999_500, "1.00ms"}, {3_250_000, "3.25ms"}, {999_994_999, "999.99ms"}, {999_995_000, "1.00s"},
		{1_500_000_000, "1.50s"}, {3600e9, "3600.00s"},
	} {
		if got := shortDuration(tc.ns); got != tc.want {
			t.Errorf("shortDuration(%d) = %q, want %q", tc.ns, got, tc.want)
		}
	}
	if got := inflightCell(2e6, 0); got != "2.00ms/-" {
		t.Errorf("inflightCell without a budget = %q", got)
	}
}
