package sim

import (
	"encoding/binary"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// FuzzSubmit feeds commands with arbitrary fields, valid or not, to a VM on
// two channels: the backend must neither panic nor lose or duplicate a
// completion, and must keep per-channel order.
func FuzzSubmit(f *testing.F) {
	seed := func(cmds ...abi.Command) []byte {
		var b []byte
		for _, c := range cmds {
			b = append(b, encodeFuzz(c)...)
		}
		return b
	}
	f.Add(seed(abi.Command{Op: abi.OpAlloc, Handle: 1, Size: 64},
		abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyHostToDevice, Length: 64},
		abi.Command{Op: abi.OpMemset, Handle: 1, Offset: 8, Length: 8, Value: 3},
		abi.Command{Op: abi.OpCopy, Handle: 1, SrcHandle: 1, Dir: abi.CopyDeviceToDevice, Offset: 1, Length: 63},
		abi.Command{Op: abi.OpCopy, Handle: 1, Dir: abi.CopyDeviceToHost, HeapOff: 60, Length: 64},
		abi.Command{Op: abi.OpFree, Handle: 1}))
	f.Add(seed(abi.Command{Op: abi.OpThrottle, DurationNs: 1 << 62}, abi.Command{Op: 77}, abi.Command{Op: abi.OpLaunch}))
	f.Add(seed(abi.Command{Op: abi.OpAlloc, Handle: 2, Size: 1 << 40}, abi.Command{Op: abi.OpMemset, Handle: 2, Offset: ^uint64(0), Length: 2}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := manual(t, "memory", "1Mi")
		heap := make([]byte, 128)
		v, r := attach(t, s, 1, 2, heap)
		n := 0
		for ; len(data) >= fuzzRecord && n < 64; n++ {
			submit(t, v, int(data[0]&1), decodeFuzz(data[:fuzzRecord]), uint64(n))
			data = data[fuzzRecord:]
		}
		run(t, s)
		got := r.all()
		if len(got) != n {
			t.Fatalf("%d completions for %d commands", len(got), n)
		}
		last := [2]int64{-1, -1}
		for _, c := range got {
			if int64(c.Tag) <= last[c.Channel] {
				t.Fatalf("channel %d: tag %d after %d", c.Channel, c.Tag, last[c.Channel])
			}
			last[c.Channel] = int64(c.Tag)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if u := s.Stats().MemoryUsed; u != 0 {
			t.Fatalf("%d bytes leaked", u)
		}
	})
}

const fuzzRecord = 48

// encodeFuzz and decodeFuzz map raw bytes to commands, fields unchecked.
func encodeFuzz(c abi.Command) []byte {
	b := make([]byte, fuzzRecord)
	le := binary.LittleEndian
	le.PutUint16(b[2:], uint16(c.Op))
	le.PutUint32(b[4:], c.Handle)
	le.PutUint32(b[8:], c.SrcHandle)
	le.PutUint32(b[12:], c.Dir)
	le.PutUint64(b[16:], c.Offset)
	le.PutUint64(b[24:], c.HeapOff)
	le.PutUint64(b[32:], c.Length|c.Size|c.DurationNs)
	le.PutUint64(b[40:], c.Value)
	return b
}

func decodeFuzz(b []byte) abi.Command {
	le := binary.LittleEndian
	x := le.Uint64(b[32:])
	return abi.Command{
		Op: abi.Opcode(le.Uint16(b[2:])), Handle: le.Uint32(b[4:]), SrcHandle: le.Uint32(b[8:]),
		Dir: le.Uint32(b[12:]), Offset: le.Uint64(b[16:]), HeapOff: le.Uint64(b[24:]),
		Length: x, Size: x, DurationNs: x, Value: le.Uint64(b[40:]),
	}
}
