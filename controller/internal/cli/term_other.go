//go:build !linux

package cli

import (
	"io"
	"os"
)

// isTerminal approximates a terminal check with the file mode where termios
// is not wired up.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
