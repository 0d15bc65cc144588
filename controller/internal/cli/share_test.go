package cli

import (
	"strings"
	"testing"
)

func TestParseShare(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr string
	}{
		{"0", 0, ""},
		{"0.25", 0.25, ""},
		{".5", 0.5, ""},
		{"1", 1, ""},
		{"1.0", 1, ""},
		{"25%", 0.25, ""},
		{" 25 % ", 0.25, ""},
		{"100%", 1, ""},
		{"0%", 0, ""},
		{"12.5%", 0.125, ""},
		{"1.01", 0, "more than the whole GPU"},
		{"101%", 0, "more than the whole GPU"},
		{"2", 0, "more than the whole GPU"},
		{"-0.5", 0, "want a fraction"},
		{"+0.5", 0, "want a fraction"},
		{"", 0, "want a fraction"},
		{"%", 0, "want a fraction"},
		{"NaN", 0, "want a fraction"},
		{"inf", 0, "want a fraction"},
		{"1e-1", 0, "want a fraction"},
		{"0x1p-1", 0, "want a fraction"},
		{"0.5%%", 0, "want a fraction"},
		{"half", 0, "want a fraction"},
		{"1..2", 0, "want a fraction"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseShare(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseShare(%q) = %v, %v; want error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseShare(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatShare(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0%"}, {0.5, "50%"}, {1, "100%"}, {1.0 / 3, "33.33%"}, {0.125, "12.5%"}, {0.00004, "0%"},
	}
	for _, tt := range tests {
		if got := FormatShare(tt.in); got != tt.want {
			t.Errorf("FormatShare(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzParseShare checks that ParseShare never panics, that what it accepts
// is a share in [0, 1], and that FormatShare's output parses back to within
// its rounding.
func FuzzParseShare(f *testing.F) {
	for _, s := range []string{"0.25", "25%", "1", "0", "1.5", "-1", "nan", "1e400", "100.000001%", ".", "5 %"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseShare(s)
		if err != nil {
			return
		}
		if !(v >= 0 && v <= 1) {
			t.Fatalf("ParseShare(%q) = %v, outside [0, 1]", s, v)
		}
		// FormatShare rounds to 0.01%: half of that, 0.00005, is the most a
		// round trip may move, plus float error at exactly half (".00215").
		const maxMove = 0.00005 + 1e-12
		back, err := ParseShare(FormatShare(v))
		if err != nil || back-v > maxMove || v-back > maxMove {
			t.Fatalf("ParseShare(%q) = %v; FormatShare -> %q parses to %v, %v", s, v, FormatShare(v), back, err)
		}
	})
}
