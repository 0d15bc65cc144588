package cli

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{"4096", 4096, ""},
		{"4096B", 4096, ""},
		{"64KiB", 64 << 10, ""},
		{"4MiB", 4 << 20, ""},
		{"4mib", 4 << 20, ""},
		{"4 MiB", 4 << 20, ""},
		{" 1GiB ", 1 << 30, ""},
		{"2TiB", 2 << 40, ""},
		{"0", 0, ""},
		{"16777215TiB", 16777215 << 40, ""},
		{"16777216TiB", 0, "too large"},
		{"18446744073709551616", 0, "too large"},
		{"4MB", 0, "want bytes"},
		{"4M", 0, "want bytes"},
		{"4K", 0, "want bytes"},
		{"MiB", 0, "want bytes"},
		{"", 0, "want bytes"},
		{"-4MiB", 0, "want bytes"},
		{"+4MiB", 0, "want bytes"},
		{"1.5MiB", 0, "want bytes"},
		{"0x1000", 0, "want bytes"},
		{"4MiBMiB", 0, "want bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseSize(%q) = %d, %v; want error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0 B"}, {1, "1 B"}, {1000, "1000 B"}, {1024, "1 KiB"}, {1536, "1536 B"},
		{4 << 20, "4 MiB"}, {3 << 30, "3 GiB"}, {1 << 50, "1024 TiB"}, {1<<20 + 1<<10, "1025 KiB"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzParseSize checks that ParseSize never panics and that what it accepts
// round-trips through FormatSize.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4MiB", "64KiB", "1GiB", "4096", "0", "4MB", "16777216TiB", " 1 b", "kib", "9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		back, err := ParseSize(strings.ReplaceAll(FormatSize(n), " ", ""))
		if err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d; FormatSize -> %q parses to %d, %v", s, n, FormatSize(n), back, err)
		}
	})
}

func TestApproxSize(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1000: "1000 B", 1024: "1 KiB", 1536 << 20: "1.5 GiB", 1 << 40: "1 TiB",
		1<<40 + 1: "1.0 TiB", 1 << 50: "1024 TiB", 1023: "1023 B", 1025: "1.0 KiB",
	} {
		if got := approxSize(n); got != want {
			t.Errorf("approxSize(%d) = %q, want %q", n, got, want)
		}
	}
}
