package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildTimeout bounds the one build of the binaries; a cold build on a
// loaded 2-core machine takes well under a minute.
const buildTimeout = 5 * time.Minute

// Build compiles sluiced, sluicectl, sluice-controller, sluice-agent,
// sluice-init and sluice-libvirt-hook statically (no cgo),
// as the Makefile does, into a new temporary directory, and records them
// for Bins. The caller removes the directory with RemoveBinaries.
func Build() (Binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return Binaries{}, err
	}
	dir, err := mkdirTemp("sluice-e2e-bin-")
	if err != nil {
		return Binaries{}, err
	}
	// sluiced starts each VM's sluice-proxy from beside its own binary, as
	// the proxy's unprivileged sandbox ids: they must reach it (o+x only).
	if err := os.Chmod(dir, 0o711); err != nil {
		os.RemoveAll(dir)
		return Binaries{}, fmt.Errorf("making the binaries reachable: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	// One go build for all three lets the toolchain share and parallelise work.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"./mediator/cmd/sluiced", "./mediator/cmd/sluice-proxy", "./controller/cmd/sluicectl", "./controller/cmd/sluice-controller", "./guest-agent/cmd/sluice-agent",
		"./guest-agent/cmd/sluice-init", "./vmm-plugin/cmd/sluice-libvirt-hook")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return Binaries{}, fmt.Errorf("building the binaries: %w\n%s", err, out)
	}
	b := Binaries{
		Sluiced:    filepath.Join(dir, "sluiced"),
		Sluicectl:  filepath.Join(dir, "sluicectl"),
		Controller: filepath.Join(dir, "sluice-controller"),
		Agent:      filepath.Join(dir, "sluice-agent"),
		Init:       filepath.Join(dir, "sluice-init"),
		Hook:       filepath.Join(dir, "sluice-libvirt-hook"),
		Root:       root,
		Dir:        dir,
	}
	mu.Lock()
	bins = &b
	mu.Unlock()
	return b, nil
}

// RemoveBinaries deletes what Build created.
func RemoveBinaries(b Binaries) error {
	if b.Dir == "" {
		return nil
	}
	if err := os.RemoveAll(b.Dir); err != nil {
		return fmt.Errorf("removing the binaries: %w", err)
	}
	return nil
}

// moduleRoot is the directory of the go.mod that holds the e2e package, so
// the suite builds the same tree wherever go test runs it from.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("finding the module root: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}
