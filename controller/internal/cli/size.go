package cli

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// errSize explains the accepted size syntax once, for every bad size.
var errSize = errors.New("want bytes or a KiB, MiB, GiB or TiB suffix, e.g. 4MiB")

// sizeUnits are binary only: "MB" is left out on purpose because operators
// read it as 10^6 and regions must be powers of two.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	{"kib", 10}, {"mib", 20}, {"gib", 30}, {"tib", 40}, {"b", 0},
}

// ParseSize parses a byte count such as "4MiB", "64KiB", "1GiB", "4096" or
// "4096B". Units are binary and case-insensitive; one space may separate
// the number from the unit.
func ParseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	var shift uint
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.shift
			break
		}
	}
	if t == "" || t[0] < '0' || t[0] > '9' {
		return 0, fmt.Errorf("invalid size %q: %w", s, errSize)
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, fmt.Errorf("invalid size %q: too large", s)
		}
		return 0, fmt.Errorf("invalid size %q: %w", s, errSize)
	}
	if shift > 0 && n > (^uint64(0))>>shift {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n << shift, nil
}

// FormatSize renders n with the largest binary unit that divides it
// exactly, so that what is printed parses back to the same number.
func FormatSize(n uint64) string {
	if n == 0 {
		return "0 B"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	tz := uint(bits.TrailingZeros64(n))
	i := min(int(tz/10), len(units)-1)
	return fmt.Sprintf("%d %s", n>>(uint(i)*10), units[i])
}

// sizeValue is a pflag.Value so that a bad size is a flag error (exit 2)
// reported by the flag parser with the flag's name.
type sizeValue struct{ n *uint64 }

func (v sizeValue) String() string {
	if v.n == nil || *v.n == 0 {
		return ""
	}
	return FormatSize(*v.n)
}

func (v sizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("size must be greater than zero")
	}
	*v.n = n
	return nil
}

func (sizeValue) Type() string { return "size" }

// quotaValue is a size that may be 0 or "none": no quota.
type quotaValue struct{ n *uint64 }

func (v quotaValue) String() string {
	if v.n == nil || *v.n == 0 {
		return ""
	}
	return FormatSize(*v.n)
}

func (v quotaValue) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "none") {
		*v.n = 0
		return nil
	}
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v.n = n
	return nil
}

func (quotaValue) Type() string { return "size" }
