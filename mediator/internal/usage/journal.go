package usage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Journal is where usage goes between two ledger flushes: two append-only
// segment files, BASE.0 and BASE.1, one of them active. Write appends a
// group of records to the active segment with one write: it survives the
// process (kill -9) at once, and the power once Sync's fdatasync returns.
// A rotation switches the active segment, flushes the ledger and then
// empties the segment it left, so that neither the appends nor their syncs
// wait for the ledger's flush.
//
// Write, Switch and Reset are called by one owner at a time; Sync may run
// beside any of them.
type Journal struct {
	segs   [2]*Segment
	active int
	next   uint64 // the next record's sequence number
	buf    []byte
}

// Segment is one of a journal's two files.
type Segment struct {
	f     *os.File
	path  string
	size  int64       // bytes committed
	err   error       // set when the file could not be brought back to size
	dirty atomic.Bool // written since its last sync
}

// SegmentPaths are the files of the journal at base.
func SegmentPaths(base string) [2]string { return [2]string{base + ".0", base + ".1"} }

// CreateJournal starts an empty journal at base (replacing what is there:
// Recover folds it into the ledger first), whose first record will be seq
// next.
func CreateJournal(base string, next uint64) (*Journal, error) {
	if next == 0 {
		return nil, fmt.Errorf("creating journal %s: sequence numbers start at 1", base)
	}
	j := &Journal{next: next}
	for i, path := range SegmentPaths(base) {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("creating journal: %w", err), j.Close())
		}
		j.segs[i] = &Segment{f: f, path: path}
		if err := j.segs[i].Reset(); err != nil {
			return nil, errors.Join(err, j.Close())
		}
	}
	if err := syncDir(filepath.Dir(base)); err != nil {
		return nil, errors.Join(err, j.Close())
	}
	return j, nil
}

// Write numbers ds (setting each Seq) and appends them to the active
// segment with one write. On an error none of them counts: the file is cut
// back to what was written before, and the caller may try them again.
func (j *Journal) Write(ds []Delta) error {
	s := j.segs[j.active]
	if s.err != nil {
		return s.err
	}
	if len(ds) == 0 {
		return nil
	}
	j.buf = j.buf[:0]
	for i := range ds {
		ds[i].Seq = j.next + uint64(i)
		j.buf = appendDelta(j.buf, ds[i])
	}
	if _, err := s.f.WriteAt(j.buf, s.size); err != nil {
		err = fmt.Errorf("appending to journal %s: %w", s.path, err)
		if terr := s.f.Truncate(s.size); terr != nil {
			// Records that may or may not be in the file would be
			// written again under new numbers: stop rather than count
			// twice.
			s.err = fmt.Errorf("journal %s unusable: %w", s.path, errors.Join(err, terr))
			return s.err
		}
		return err
	}
	s.size += int64(len(j.buf))
	s.dirty.Store(true)
	j.next += uint64(len(ds))
	return nil
}

// Sync puts everything written so far on stable storage (fdatasync of the
// segments written since their last sync). A failure leaves the records
// written: a later Recover may or may not find them, and they must not be
// written again.
func (j *Journal) Sync() error {
	var errs []error
	for _, s := range j.segs {
		if !s.dirty.Swap(false) {
			continue
		}
		if err := datasync(s.f); err != nil {
			s.dirty.Store(true)
			errs = append(errs, fmt.Errorf("syncing journal %s: %w", s.path, err))
		}
	}
	return errors.Join(errs...)
}

// Append is Write then Sync.
func (j *Journal) Append(ds []Delta) error {
	if err := j.Write(ds); err != nil {
		return err
	}
	return j.Sync()
}

// Switch makes the other segment the active one and returns the one it
// leaves: Reset it once a flushed ledger holds its records (the ledger's
// journal sequence is at least Next()-1 at the switch).
func (j *Journal) Switch() *Segment {
	old := j.segs[j.active]
	j.active = 1 - j.active
	return old
}

// Next is the sequence number the next record will get.
func (j *Journal) Next() uint64 { return j.next }

// Size is the bytes of both segments.
func (j *Journal) Size() int64 { return j.segs[0].size + j.segs[1].size }

// ActiveEmpty reports whether the active segment holds no record.
func (j *Journal) ActiveEmpty() bool { return j.segs[j.active].size <= int64(len(JournalMagic)) }

// Reset drops the segment's records: the magic alone, synced. A crash
// before it leaves records the next Recover skips, the ledger holding them.
func (s *Segment) Reset() error {
	if err := s.f.Truncate(0); err != nil {
		return fmt.Errorf("resetting journal %s: %w", s.path, err)
	}
	if _, err := s.f.WriteAt([]byte(JournalMagic), 0); err != nil {
		return fmt.Errorf("writing journal %s: %w", s.path, err)
	}
	if err := datasync(s.f); err != nil {
		return fmt.Errorf("syncing journal %s: %w", s.path, err)
	}
	s.size, s.err = int64(len(JournalMagic)), nil
	return nil
}

// Close closes the files; their records stay for the next Recover.
func (j *Journal) Close() error {
	var errs []error
	for _, s := range j.segs {
		if s != nil {
			errs = append(errs, s.f.Close())
		}
	}
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
