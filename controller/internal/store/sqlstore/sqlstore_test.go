package sqlstore

import "testing"

func TestRebind(t *testing.T) {
	for _, c := range []struct {
		numbered bool
		in, want string
	}{
		{false, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = ? AND c = ?`},
		{true, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{true, `SELECT '?' FROM t WHERE ? = '' OR b = ?`, `SELECT '?' FROM t WHERE $1 = '' OR b = $2`},
		{true, `SELECT 1`, `SELECT 1`},
	} {
		d := Dialect{Numbered: c.numbered}
		if got := d.rebind(c.in); got != c.want {
			t.Errorf("rebind(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
