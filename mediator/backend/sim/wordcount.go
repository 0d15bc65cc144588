package sim

import (
	"bytes"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/slotcall"
)

// sluice_wordcount (abi.KernelWordCount): work-group g takes files g,
// g+groups, ... (kernel granularity: group 0 takes every file); its caller
// opens each, preads it chunk by chunk into the group's buffer, the group
// counts the chunk's words, and the caller closes it. Out per group: words,
// bytes, errno of the first failure.

// atFDCWD is AT_FDCWD (-100) as the u64 argument.
const atFDCWD = ^uint64(99)

func checkWordCount(l *launch) abi.ErrorCode {
	chunk := l.u64(abi.WCChunk)
	switch {
	case l.u64(abi.WCHeap) != 0, chunk == 0, l.u32(abi.WCNumPaths) > maxPaths:
		return abi.ErrBadRecord
	case l.u64(abi.WCPaths) >= uint64(len(l.heap)):
		return abi.ErrHeapRange
	}
	if code := l.heapRange(l.u64(abi.WCBuf), l.wcGroups(), chunk); code != abi.OK {
		return code
	}
	return l.heapRange(l.a.out, l.groups, abi.WCOutPerGroup)
}

// wcGroups is how many work-groups take files (and have a buffer).
func (l *launch) wcGroups() int {
	if l.a.gran == abi.ProgKernel {
		return 1
	}
	return l.groups
}

// wcCount is one group's tally.
type wcCount struct{ words, bytes, errno uint64 }

func (w *wcCount) failed(e abi.Errno) {
	if w.errno == 0 {
		w.errno = uint64(max(e, 1))
	}
}

func groupWordCount(l *launch, g int) error {
	var w wcCount
	if g < l.wcGroups() {
		paths := l.wcPaths()
		for f := g; f < len(paths); f += l.wcGroups() {
			if err := l.wcFile(g, paths[f], &w); err != nil {
				return err
			}
		}
	}
	out := l.a.out + uint64(g)*abi.WCOutPerGroup
	l.putHeap64(out, w.words)
	l.putHeap64(out+8, w.bytes)
	l.putHeap64(out+16, w.errno)
	return nil
}

// wcPaths finds the heap offsets of the paths, back to back from paths; a
// path not NUL-terminated inside the heap is -1.
func (l *launch) wcPaths() []int64 {
	n := int(l.u32(abi.WCNumPaths))
	out := make([]int64, n)
	off := l.u64(abi.WCPaths)
	for i := range out {
		out[i] = -1
		if off >= uint64(len(l.heap)) {
			continue
		}
		end := bytes.IndexByte(l.heap[off:], 0)
		if end < 0 {
			off = uint64(len(l.heap))
			continue
		}
		out[i] = int64(off)
		off += uint64(end) + 1
	}
	return out
}

// wcFile counts the words of one file into w. Only a failure of the slot
// protocol is an error; a failed call is recorded in w.
func (l *launch) wcFile(g int, path int64, w *wcCount) error {
	if path < 0 {
		w.failed(abi.ErrnoFAULT)
		return nil
	}
	r, err := l.wcCall(g, abi.SysOpenat, atFDCWD, uint64(path), 0, 0)
	if err != nil || r.Errno != 0 {
		w.failed(r.Errno)
		return err
	}
	fd := uint64(r.Ret)
	chunk := l.u64(abi.WCChunk)
	buf := l.u64(abi.WCBuf) + uint64(g)*chunk
	inWord := false
	for off := uint64(0); ; {
		r, err = l.wcCall(g, abi.SysPread64, fd, buf, chunk, off)
		if err != nil {
			return err
		}
		if r.Errno != 0 {
			w.failed(r.Errno)
			break
		}
		if r.Ret <= 0 {
			break
		}
		n := min(uint64(r.Ret), chunk)
		b, _ := span(l.heap, buf, n)
		parts := 1
		if l.strong() {
			parts = l.items // the whole group counts, a part each
		}
		var words uint64
		words, inWord = countWords(b, parts, inWord)
		w.words += words
		w.bytes += n
		off += n
	}
	if r, err = l.wcCall(g, abi.SysClose, fd, 0, 0, 0); err != nil || r.Errno != 0 {
		w.failed(r.Errno)
	}
	return err
}

// wcCall makes one blocking call from group g's caller.
func (l *launch) wcCall(g int, nr uint16, a0, a1, a2, a3 uint64) (slotcall.Result, error) {
	c := g
	if l.a.gran == abi.ProgWorkItem {
		c = g * l.items // the group's first work-item
	}
	return l.call(c, slotcall.Request{Number: nr, Flags: l.a.flags | abi.SysFlagBlocking, Args: [6]uint64{a0, a1, a2, a3}})
}

// countWords counts the words that start in b, split into parts as the
// group's work-items split it: each counts the starts in its part, looking
// one byte back (or at inWord, whether the previous chunk ended inside a
// word). It also reports whether b ends inside a word.
func countWords(b []byte, parts int, inWord bool) (uint64, bool) {
	var words uint64
	for p := range parts {
		lo, hi := len(b)*p/parts, len(b)*(p+1)/parts
		for i := lo; i < hi; i++ {
			prev := inWord
			if i > 0 {
				prev = !isSpace(b[i-1])
			}
			if !isSpace(b[i]) && !prev {
				words++
			}
		}
	}
	if len(b) > 0 {
		inWord = !isSpace(b[len(b)-1])
	}
	return words, inWord
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
