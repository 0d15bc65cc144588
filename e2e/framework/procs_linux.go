package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LeftoverProcesses lists the running processes whose executable lies in
// dir, as "pid path": anything still running from the suite's binaries,
// orphans of the framework's children included.
func LeftoverProcesses(dir string) ([]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	var left []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// Processes of other users, or gone meanwhile, cannot be ours.
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(exe, prefix) && !zombie(pid) {
			left = append(left, fmt.Sprintf("%d %s", pid, exe))
		}
	}
	return left, nil
}
