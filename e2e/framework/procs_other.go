//go:build !linux

package framework

import "errors"

// LeftoverProcesses is only implemented on Linux, where the suite runs.
func LeftoverProcesses(dir string) ([]string, error) {
	return nil, errors.New("listing processes: only implemented on Linux")
}
