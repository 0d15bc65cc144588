// Package testlog captures what the default slog logger writes during a
// test, for tests that check what an operator would read: Capture sends
// the records to a Buffer, safe for the goroutines that log at once, until
// the test ends.
package testlog

import (
	"bytes"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is a log sink many goroutines may write at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Capture makes the default logger a text handler on a new Buffer until t
// ends, when the previous one is back. The log package's output and flags
// are put back too: slog.SetDefault points them at the new handler, and
// putting slog's own default handler back does not undo that (that
// handler writes through the log package, so it would go on writing to the
// Buffer).
func Capture(t testing.TB) *Buffer {
	t.Helper()
	l := &Buffer{}
	old, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(l, nil)))
	t.Cleanup(func() {
		slog.SetDefault(old)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
	return l
}

// Wait waits up to within until what was written holds s, and fails t if
// it does not.
func (l *Buffer) Wait(t testing.TB, s string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(l.String(), s); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no record with %s in %v; the log:\n%s", s, within, l.String())
		}
	}
}
