package usage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// Delta is one journal record: what one VM used since its previous record.
type Delta struct {
	Seq   uint64    // the journal's sequence number, one per record
	Name  string    // the VM
	Since time.Time // the VM's first use, for a VM the ledger does not know yet
	Usage Record    // the counts added (Usage.Since is ignored)
}

// Journal records on disk, little endian:
//
//	crc32c  u32   over everything after it (length included)
//	length  u32   of the body
//	body:   seq u64, since i64 (Unix ns, 0: unknown), gpu_ns u64,
//	        kernels u64, commands u64, errors u64, name (the rest)
const (
	recHeader  = 8
	bodyFixed  = 48
	maxNameLen = 63 // hostapi.NameRE's bound
	maxRecord  = recHeader + bodyFixed + maxNameLen
)

// JournalMagic opens every journal file (8 bytes: format and version).
const JournalMagic = "SLJRNL01"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is a journal record that fails its checksum or its checks.
var ErrCorrupt = errors.New("corrupt journal record")

// appendDelta encodes d onto b.
func appendDelta(b []byte, d Delta) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, 0) // crc, below
	b = binary.LittleEndian.AppendUint32(b, uint32(bodyFixed+len(d.Name)))
	var since int64
	if !d.Since.IsZero() {
		since = d.Since.UnixNano()
	}
	for _, v := range []uint64{d.Seq, uint64(since), d.Usage.GPUNs, d.Usage.Kernels, d.Usage.Commands, d.Usage.Errors} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = append(b, d.Name...)
	binary.LittleEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// decodeDelta decodes the record at the start of b and returns it with its
// encoded length. io.ErrUnexpectedEOF: b holds only part of a record (a
// torn write); ErrCorrupt: the bytes are no valid record.
func decodeDelta(b []byte) (Delta, int, error) {
	if len(b) < recHeader {
		return Delta{}, 0, errTorn
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if n < bodyFixed+1 || n > bodyFixed+maxNameLen {
		return Delta{}, 0, fmt.Errorf("record length %d: %w", n, ErrCorrupt)
	}
	size := recHeader + int(n)
	if len(b) < size {
		return Delta{}, 0, errTorn
	}
	if got, want := crc32.Checksum(b[4:size], castagnoli), binary.LittleEndian.Uint32(b); got != want {
		return Delta{}, 0, fmt.Errorf("checksum %#x, want %#x: %w", got, want, ErrCorrupt)
	}
	body := b[recHeader:size]
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(body[8*i:]) }
	d := Delta{Seq: u(0), Name: string(body[bodyFixed:]),
		Usage: Record{GPUNs: u(2), Kernels: u(3), Commands: u(4), Errors: u(5)}}
	if ns := int64(u(1)); ns != 0 {
		d.Since = time.Unix(0, ns).UTC()
	}
	if d.Seq == 0 {
		return Delta{}, 0, fmt.Errorf("sequence 0: %w", ErrCorrupt)
	}
	if !hostapi.ValidName(d.Name) {
		return Delta{}, 0, fmt.Errorf("vm name %q: %w", d.Name, ErrCorrupt)
	}
	return d, size, nil
}

// errTorn is a record cut short by the end of the file.
var errTorn = fmt.Errorf("torn journal record: %w", ErrCorrupt)

// Decoded is what DecodeJournal found in a journal file.
type Decoded struct {
	Deltas []Delta // the valid records, in order
	Valid  int     // bytes of the file they (and the magic) span
	Err    error   // why decoding stopped before the end; nil at the end
}

// DecodeJournal decodes a journal segment's content: the magic, then records
// of increasing sequence numbers (consecutive but where a rotation left a
// segment that could not be reset). It stops at the first record that is torn,
// corrupt or out of sequence, and reports where: everything after Valid is
// to be truncated. A file shorter than the magic is an empty journal torn at
// creation.
func DecodeJournal(b []byte) Decoded {
	if len(b) < len(JournalMagic) {
		if len(b) == 0 {
			return Decoded{}
		}
		return Decoded{Err: fmt.Errorf("journal header: %w", errTorn)}
	}
	if string(b[:len(JournalMagic)]) != JournalMagic {
		return Decoded{Err: fmt.Errorf("journal magic %q: %w", b[:len(JournalMagic)], ErrCorrupt)}
	}
	out := Decoded{Valid: len(JournalMagic)}
	for out.Valid < len(b) {
		d, n, err := decodeDelta(b[out.Valid:])
		if err == nil && len(out.Deltas) > 0 && d.Seq <= out.Deltas[len(out.Deltas)-1].Seq {
			err = fmt.Errorf("sequence %d after %d: %w", d.Seq, out.Deltas[len(out.Deltas)-1].Seq, ErrCorrupt)
		}
		if err != nil {
			out.Err = fmt.Errorf("at byte %d: %w", out.Valid, err)
			return out
		}
		out.Deltas = append(out.Deltas, d)
		out.Valid += n
	}
	return out
}
