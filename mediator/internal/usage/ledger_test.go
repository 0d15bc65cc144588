package usage

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLedgerSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.json")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l.Put("a", Record{GPUNs: 123, Kernels: 4, Commands: 5, Errors: 1, Since: since})
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := l2.Get("a")
	if !ok || got.GPUNs != 123 || got.Kernels != 4 || got.Commands != 5 || got.Errors != 1 || !got.Since.Equal(since) {
		t.Fatalf("reopened record = %+v, %v", got, ok)
	}
	if _, ok := l2.Get("b"); ok {
		t.Fatal("unknown VM has a record")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestLedgerRejectsCorruptFile(t *testing.T) {
	for name, content := range map[string]string{
		"garbage": "{not json",
		"version": `{"version": 99, "vms": {}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "usage.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(path); err == nil {
				t.Fatal("corrupt ledger opened without error")
			}
		})
	}
}

func TestRecordAdd(t *testing.T) {
	since := time.Unix(10, 0)
	r := Record{GPUNs: 1, Kernels: 2, Commands: 3, Errors: 4, Since: since}.Add(Record{GPUNs: 10, Kernels: 20, Commands: 30, Errors: 40, Since: time.Unix(99, 0)})
	if r != (Record{GPUNs: 11, Kernels: 22, Commands: 33, Errors: 44, Since: since}) {
		t.Fatalf("Add = %+v", r)
	}
}
