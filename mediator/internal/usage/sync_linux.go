package usage

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): the data and the size, not the timestamps.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
