package limitread

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFile(t *testing.T) {
	if _, err := File("/dev/zero", 1<<20); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "/dev/zero is larger than 1024 KiB") {
		t.Fatalf("/dev/zero: %v; want ErrTooLarge", err)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := File(path, 5); err != nil || string(b) != "12345" {
		t.Fatalf("a file of the limit: %q, %v", b, err)
	}
	if _, err := File(path, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file past the limit: %v", err)
	}
	if _, err := File(filepath.Join(t.TempDir(), "none"), 5); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}
