// Package gpuinvtest gives tests the sysfs trees recorded for gpuinv
// (gpuinv/testdata: the H100 host, the build machine, the SR-IOV ones),
// unpacked into a temporary directory each.
package gpuinvtest

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Tree unpacks gpuinv/testdata/name into a temporary directory and returns
// it: a sysfs root for gpuinv.Discover.
func Tree(t testing.TB, name string) string {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("gpuinvtest: cannot find its own source file")
	}
	f, err := os.Open(filepath.Join(filepath.Dir(here), "..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := unpack(tr, h, root); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// unpack writes one entry of the tree under root.
func unpack(tr *tar.Reader, h *tar.Header, root string) error {
	p := filepath.Join(root, filepath.FromSlash(h.Name))
	if p != root && !strings.HasPrefix(p, root+string(filepath.Separator)) {
		return errors.New(h.Name + " leaves the tree")
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(p, 0o755)
	case tar.TypeSymlink:
		return os.Symlink(h.Linkname, p)
	case tar.TypeReg:
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		return os.WriteFile(p, b, 0o644)
	default:
		return errors.New(h.Name + ": unexpected type " + string(h.Typeflag))
	}
}
