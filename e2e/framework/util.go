package framework

import (
	"io/fs"
	"os"
	"strconv"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// IsSocket reports whether path is a UNIX socket.
func IsSocket(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}
