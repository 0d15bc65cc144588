// Package usage keeps the mediator's billing data: cumulative GPU time and
// command counts per VM name, persisted in the state directory so that they
// survive restarts of the mediator. Records outlive their VMs: deleting a VM
// keeps its usage, and a VM created again under the same name continues it.
//
// The ledger is one JSON file, replaced atomically (write a temporary file,
// fsync, rename, fsync the directory), so a crash leaves either the old or
// the new ledger, never a torn one. Between two ledger flushes the usage
// goes to the journal: an append-only file of per-VM deltas, each with a
// sequence number and a CRC32C, group-committed every few milliseconds.
// The ledger records the last journal sequence it holds, so Recover folds
// every record in exactly once, also after a crash between flushing the
// ledger and emptying the journal.
package usage

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Record is one VM's cumulative usage.
type Record struct {
	GPUNs    uint64    `json:"gpu_ns"`
	Kernels  uint64    `json:"kernels"`
	Commands uint64    `json:"commands"`
	Errors   uint64    `json:"errors"`
	Since    time.Time `json:"since"`
}

// Add returns r plus the counts of d (Since stays r's).
func (r Record) Add(d Record) Record {
	r.GPUNs += d.GPUNs
	r.Kernels += d.Kernels
	r.Commands += d.Commands
	r.Errors += d.Errors
	return r
}

const fileVersion = 1

type file struct {
	Version int               `json:"version"`
	VMs     map[string]Record `json:"vms"`
	// JournalSeq is the last journal record folded in (0: none).
	JournalSeq uint64 `json:"journal_seq,omitempty"`
}

// Ledger is the persisted set of records.
type Ledger struct {
	path string
	mu   sync.Mutex
	recs map[string]Record
	seq  uint64 // the last journal record applied
}

// Open loads the ledger at path, or starts an empty one if the file does not
// exist. A corrupt ledger is an error, not a silent reset: it is billing data.
func Open(path string) (*Ledger, error) {
	l := &Ledger{path: path, recs: map[string]Record{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading usage ledger: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decoding usage ledger %s: %w", path, err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("usage ledger %s has version %d, want %d", path, f.Version, fileVersion)
	}
	if f.VMs != nil {
		l.recs = f.VMs
	}
	l.seq = f.JournalSeq
	return l, nil
}

// Apply adds a journal record to its VM's record (creating it, from the
// record's Since, for a VM the ledger does not know) unless the ledger
// holds it already (its sequence number is not past Seq). It reports
// whether it applied d.
func (l *Ledger) Apply(d Delta) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.Seq <= l.seq {
		return false
	}
	r, ok := l.recs[d.Name]
	if !ok {
		r.Since = d.Since
	}
	l.recs[d.Name] = r.Add(d.Usage)
	l.seq = d.Seq
	return true
}

// Settle replaces the record of a VM with its final count, journaled or
// not, and marks every journal record up to seq as held: a clean stop
// makes the ledger whole whatever became of the journal.
func (l *Ledger) Settle(name string, r Record, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs[name] = r
	l.seq = max(l.seq, seq)
}

// Seq is the last journal record the ledger holds.
func (l *Ledger) Seq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Get returns the record of a VM.
func (l *Ledger) Get(name string) (Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.recs[name]
	return r, ok
}

// Put replaces the record of a VM (in memory; Flush persists).
func (l *Ledger) Put(name string, r Record) {
	l.mu.Lock()
	l.recs[name] = r
	l.mu.Unlock()
}

// Flush writes the ledger to disk atomically.
func (l *Ledger) Flush() error { return l.Snapshot().Write() }

// Snapshot is the ledger's content at one moment.
type Snapshot struct {
	path string
	f    file
}

// Snapshot copies the ledger, to Write without holding up its updates.
func (l *Ledger) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Snapshot{path: l.path, f: file{Version: fileVersion, VMs: maps.Clone(l.recs), JournalSeq: l.seq}}
}

// Write replaces the ledger file with the snapshot atomically.
func (s Snapshot) Write() error {
	b, err := json.MarshalIndent(s.f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding usage ledger: %w", err)
	}
	return WriteFileAtomic(s.path, b)
}

// WriteFileAtomic replaces path with data so that a crash at any point leaves
// either the old or the new content.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return syncDir(dir)
}
