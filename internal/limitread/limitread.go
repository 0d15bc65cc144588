// Package limitread reads files that a user names and that must be small
// (specs, configuration): it stops past a limit instead of reading whatever
// the path gives (/dev/zero, a pipe, a huge file) until memory runs out.
package limitread

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge means the file holds more than the limit.
var ErrTooLarge = errors.New("file too large")

// File reads the file at path, failing with ErrTooLarge past limit bytes
// without reading further: a device or a pipe has no size to check first.
func File(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d KiB, the most it may have: %w", path, limit>>10, ErrTooLarge)
	}
	return data, nil
}
