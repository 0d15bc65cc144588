package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// errShare explains the accepted share syntax once, for every bad share.
var errShare = errors.New("want a fraction from 0 to 1 or a percentage, e.g. 0.25 or 25%")

// ParseShare parses a share of the GPU: a fraction such as "0.25" or a
// percentage such as "25%", within [0, 1]. 0 means no cap.
func ParseShare(s string) (float64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	if p, ok := strings.CutSuffix(t, "%"); ok {
		t, scale = strings.TrimSpace(p), 100
	}
	// ParseFloat takes "inf", "nan" and hex floats; a share is plain decimal.
	if t == "" || strings.ContainsFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') }) {
		return 0, fmt.Errorf("invalid share %q: %w", s, errShare)
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid share %q: %w", s, errShare)
	}
	f /= scale
	if !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("invalid share %q: more than the whole GPU: %w", s, errShare)
	}
	return f, nil
}

// shareValue is a pflag.Value so that a bad share is a flag error (exit 2)
// reported by the flag parser with the flag's name.
type shareValue struct{ f *float64 }

func (v shareValue) String() string {
	if v.f == nil || *v.f == 0 {
		return ""
	}
	return FormatShare(*v.f)
}

func (v shareValue) Set(s string) error {
	f, err := ParseShare(s)
	if err != nil {
		return err
	}
	*v.f = f
	return nil
}

func (shareValue) Type() string { return "share" }
