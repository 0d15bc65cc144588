package usage

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
)

// Recovery is what Recover did with the journal.
type Recovery struct {
	Folded  int   // records added to the ledger
	Skipped int   // records the ledger held already
	Cut     int64 // bytes of torn or corrupt tails dropped
	CutErr  error // why they were dropped
}

// Recover opens the ledger at ledgerPath and folds into it, in sequence
// order, the valid records of the journal at journalBase that it does not
// hold yet, then flushes it. A torn or corrupt tail of a segment is dropped
// (reported in the Recovery, not an error): those records never reached
// the file whole. The segments are left as they were; CreateJournal
// (journalBase, l.Seq()+1) replaces them.
func Recover(ledgerPath, journalBase string) (*Ledger, Recovery, error) {
	var rec Recovery
	l, err := Open(ledgerPath)
	if err != nil {
		return nil, rec, err
	}
	var ds []Delta
	for _, path := range SegmentPaths(journalBase) {
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, rec, fmt.Errorf("reading usage journal: %w", err)
		}
		dec := DecodeJournal(b)
		ds = append(ds, dec.Deltas...)
		if dec.Err != nil {
			rec.Cut += int64(len(b) - dec.Valid)
			rec.CutErr = errors.Join(rec.CutErr, fmt.Errorf("%s: %w", path, dec.Err))
		}
	}
	slices.SortStableFunc(ds, func(a, b Delta) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, d := range ds {
		if l.Apply(d) {
			rec.Folded++
		} else {
			rec.Skipped++
		}
	}
	if rec.Folded > 0 {
		if err := l.Flush(); err != nil {
			return nil, rec, fmt.Errorf("folding the usage journal: %w", err)
		}
	}
	return l, rec, nil
}
