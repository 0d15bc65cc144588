package usage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// paths returns a ledger path and a journal base in a new directory.
func paths(t *testing.T) (ledger, journal string) {
	dir := t.TempDir()
	return filepath.Join(dir, "usage.json"), filepath.Join(dir, "usage.journal")
}

// active0 is the segment a new journal appends to.
func active0(base string) string { return SegmentPaths(base)[0] }

func recoverOK(t *testing.T, ledger, journal string) (*Ledger, Recovery) {
	t.Helper()
	l, rec, err := Recover(ledger, journal)
	if err != nil {
		t.Fatal(err)
	}
	return l, rec
}

func newJournal(t *testing.T, base string, next uint64) *Journal {
	t.Helper()
	j, err := CreateJournal(base, next)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func appendOK(t *testing.T, j *Journal, ds ...Delta) {
	t.Helper()
	if err := j.Append(ds); err != nil {
		t.Fatal(err)
	}
}

var since = time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)

func delta(name string, gpu uint64) Delta {
	return Delta{Name: name, Since: since, Usage: Record{GPUNs: gpu, Kernels: 1, Commands: 2, Errors: 3}}
}

func TestJournalFoldedOnce(t *testing.T) {
	lp, jp := paths(t)
	j := newJournal(t, jp, 1)
	appendOK(t, j, delta("a", 10), delta("b", 20))
	appendOK(t, j, delta("a", 5))
	if j.Next() != 4 {
		t.Fatalf("next sequence %d after 3 records, want 4", j.Next())
	}
	j.Close()

	// A crash after the ledger's flush and before the journal's reset
	// leaves both: the second recovery must skip every record.
	for i, want := range []Recovery{{Folded: 3}, {Skipped: 3}} {
		l, rec := recoverOK(t, lp, jp)
		if rec != want {
			t.Fatalf("recovery %d: %+v, want %+v", i, rec, want)
		}
		a, _ := l.Get("a")
		b, _ := l.Get("b")
		if a.GPUNs != 15 || a.Kernels != 2 || a.Commands != 4 || a.Errors != 6 || !a.Since.Equal(since) || b.GPUNs != 20 || l.Seq() != 3 {
			t.Fatalf("recovery %d: a %+v, b %+v, seq %d", i, a, b, l.Seq())
		}
	}

	// The next journal continues the numbering; a record of a known VM
	// keeps the ledger's Since.
	j = newJournal(t, jp, 4)
	later := delta("a", 1)
	later.Since = since.Add(time.Hour)
	appendOK(t, j, later)
	j.Close()
	l, rec := recoverOK(t, lp, jp)
	if a, _ := l.Get("a"); rec.Folded != 1 || a.GPUNs != 16 || !a.Since.Equal(since) || l.Seq() != 4 {
		t.Fatalf("after a new journal: %+v, a %+v, seq %d", rec, a, l.Seq())
	}
}

func TestJournalTornTailDropped(t *testing.T) {
	lp, jp := paths(t)
	j := newJournal(t, jp, 7)
	appendOK(t, j, delta("a", 10))
	whole := j.segs[0].size
	appendOK(t, j, delta("a", 100), delta("b", 1))
	j.Close()
	full, err := os.ReadFile(active0(jp))
	if err != nil {
		t.Fatal(err)
	}
	// Every cut inside the second group: the first record survives, and
	// the records of the second that are whole; a cut between two records
	// drops nothing torn.
	between := int(whole) + len(appendDelta(nil, delta("a", 100)))
	for cut := int(whole) + 1; cut < len(full); cut++ {
		if err := os.WriteFile(active0(jp), full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		os.Remove(lp)
		l, rec := recoverOK(t, lp, jp)
		a, _ := l.Get("a")
		if (cut == between) != (rec.Cut == 0) || (rec.Cut == 0) != (rec.CutErr == nil) || (a.GPUNs != 10) != (cut >= between) {
			t.Fatalf("cut at %d: %+v, a %+v", cut, rec, a)
		}
		if _, ok := l.Get("b"); ok {
			t.Fatalf("cut at %d: the torn last record counted", cut)
		}
	}
}

func TestJournalCorruptRecordEndsIt(t *testing.T) {
	lp, jp := paths(t)
	j := newJournal(t, jp, 1)
	appendOK(t, j, delta("a", 10))
	first := j.segs[0].size
	appendOK(t, j, delta("a", 100), delta("a", 1000))
	j.Close()
	b, _ := os.ReadFile(active0(jp))
	b[first+20] ^= 1 // in the second record's body
	if err := os.WriteFile(active0(jp), b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, rec := recoverOK(t, lp, jp)
	if a, _ := l.Get("a"); a.GPUNs != 10 || rec.Folded != 1 || !errors.Is(rec.CutErr, ErrCorrupt) || rec.Cut != int64(len(b))-first {
		t.Fatalf("a %+v, %+v", a, rec)
	}
}

// A rotation: switch segments, append to the new one while the ledger is
// flushed, reset the old one. A crash at any step counts each record once.
func TestJournalRotation(t *testing.T) {
	lp, jp := paths(t)
	j := newJournal(t, jp, 1)
	defer j.Close()
	appendOK(t, j, delta("a", 10))
	if j.ActiveEmpty() {
		t.Fatal("a journal with a record is empty")
	}
	l, _ := recoverOK(t, lp, jp) // the daemon's ledger, up to date
	old := j.Switch()
	snap := l.Snapshot()
	appendOK(t, j, delta("a", 1)) // while the ledger is written
	check := func(step string) {
		t.Helper()
		_, after := paths(t)
		for i, p := range SegmentPaths(jp) { // a copy: Recover flushes the ledger
			b, _ := os.ReadFile(p)
			os.WriteFile(SegmentPaths(after)[i], b, 0o600)
		}
		lb, _ := os.ReadFile(lp)
		lcopy := after + ".json"
		os.WriteFile(lcopy, lb, 0o600)
		l2, rec := recoverOK(t, lcopy, after)
		if a, _ := l2.Get("a"); a.GPUNs != 11 || l2.Seq() != 2 {
			t.Fatalf("crash %s: a %+v, %+v, seq %d", step, a, rec, l2.Seq())
		}
	}
	check("before the ledger's flush")
	if err := snap.Write(); err != nil {
		t.Fatal(err)
	}
	check("before the old segment's reset")
	if err := old.Reset(); err != nil {
		t.Fatal(err)
	}
	check("after the rotation")
	if j.Next() != 3 {
		t.Fatalf("next %d", j.Next())
	}
	// The old segment, active again, continues the numbering.
	j.Switch()
	appendOK(t, j, delta("a", 100))
	check2, rec := recoverOK(t, lp, jp)
	if a, _ := check2.Get("a"); a.GPUNs != 111 || rec.Folded != 2 {
		t.Fatalf("after switching back: a %+v, %+v", a, rec)
	}
}

func TestJournalAppendFailureIsNotCommitted(t *testing.T) {
	_, jp := paths(t)
	j := newJournal(t, jp, 1)
	j.Close()
	for range 2 { // and stays failed: records half written must not be written again
		if err := j.Append([]Delta{delta("a", 1)}); err == nil {
			t.Fatal("append to a closed file succeeded")
		}
	}
	if j.Next() != 1 || !j.ActiveEmpty() {
		t.Fatalf("a failed append moved the journal: next %d, size %d", j.Next(), j.Size())
	}
}

func TestDecodeJournalRejects(t *testing.T) {
	good := appendDelta([]byte(JournalMagic), Delta{Seq: 1, Name: "a"})
	for name, b := range map[string][]byte{
		"magic":         append([]byte("SLJRNL02"), good[8:]...),
		"seq 0":         appendDelta([]byte(JournalMagic), Delta{Seq: 0, Name: "a"}),
		"bad name":      appendDelta([]byte(JournalMagic), Delta{Seq: 1, Name: "../x"}),
		"out of order":  appendDelta(bytes.Clone(good), Delta{Seq: 1, Name: "a"}),
		"short magic":   []byte("SLJ"),
		"header torn":   good[:len(good)-1],
		"length absurd": append([]byte(JournalMagic), 0, 0, 0, 0, 255, 255, 255, 255),
	} {
		t.Run(name, func(t *testing.T) {
			d := DecodeJournal(b)
			if !errors.Is(d.Err, ErrCorrupt) {
				t.Fatalf("decoded %+v without a corruption", d)
			}
		})
	}
	if d := DecodeJournal(good); d.Err != nil || len(d.Deltas) != 1 || d.Valid != len(good) {
		t.Fatalf("good journal: %+v", d)
	}
}

func FuzzDecodeJournal(f *testing.F) {
	b := []byte(JournalMagic)
	f.Add(b)
	for i := range uint64(3) {
		b = appendDelta(b, Delta{Seq: 5 + i, Name: "vm-1", Since: since, Usage: Record{GPUNs: i}})
		f.Add(bytes.Clone(b))
	}
	f.Add(b[:len(b)-3])
	f.Fuzz(func(t *testing.T, b []byte) {
		d := DecodeJournal(b)
		if d.Valid > len(b) || (d.Err == nil) != (d.Valid == len(b)) {
			t.Fatalf("valid %d of %d, err %v", d.Valid, len(b), d.Err)
		}
		// What was accepted encodes back to the same bytes: nothing in a
		// record is ignored by the decoder.
		again := []byte(JournalMagic)
		for i, x := range d.Deltas {
			if i > 0 && x.Seq <= d.Deltas[i-1].Seq {
				t.Fatalf("sequence %d after %d", x.Seq, d.Deltas[i-1].Seq)
			}
			again = appendDelta(again, x)
		}
		if d.Valid > 0 && !bytes.Equal(again, b[:d.Valid]) {
			t.Fatalf("re-encoded %x, read %x", again, b[:d.Valid])
		}
	})
}
