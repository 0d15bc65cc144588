// Package framework owns the fixtures of Sluice's end-to-end suite: it builds
// the three binaries once, starts sluiced daemons in throwaway directories,
// creates VMs from a small builder, runs sluicectl and sluice-agent as child
// processes, and makes sure every process, socket and directory it created is
// gone again.
//
// Helpers assert with Gomega and register their teardown with Ginkgo's
// DeferCleanup, so they must be called from inside a running spec or
// setup node. Each child process is tracked; a spec that fails half way still
// gets its processes killed and its directories removed.
package framework

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/onsi/ginkgo/v2"
)

// Binaries are the paths of the binaries under test.
type Binaries struct {
	Sluiced    string
	Sluicectl  string
	Controller string // sluice-controller
	Agent      string
	Init       string // the guest image's /init
	Hook       string // the libvirt qemu hook
	Root       string // the module's root (for deploy/ scripts)
	Dir        string // the directory holding them all
}

var (
	mu      sync.Mutex
	bins    *Binaries
	tempDir []string // every directory the framework created, to check they are gone
)

// Bins returns the binaries built by Build; it fails the spec when Build has
// not run, since nothing can be tested without them.
func Bins() Binaries {
	mu.Lock()
	defer mu.Unlock()
	if bins == nil {
		ginkgo.Fail("framework: the binaries are not built (call framework.Build from BeforeSuite)", 1)
	}
	return *bins
}

// mkdirTemp creates a short-named temporary directory: UNIX socket paths
// are limited to 107 bytes and the endpoint sockets live below it.
func mkdirTemp(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("creating temporary directory: %w", err)
	}
	mu.Lock()
	tempDir = append(tempDir, dir)
	mu.Unlock()
	return dir, nil
}

// TempDirs lists the temporary directories the framework created.
func TempDirs() []string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(tempDir)
}

// LeftoverDirs lists the temporary directories the framework created that
// still exist.
func LeftoverDirs() []string {
	mu.Lock()
	defer mu.Unlock()
	var left []string
	for _, d := range tempDir {
		if _, err := os.Lstat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}
