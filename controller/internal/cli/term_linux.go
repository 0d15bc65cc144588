package cli

import (
	"io"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal. A character device such as
// /dev/null is not one, hence termios rather than the file mode.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
