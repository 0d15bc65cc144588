package testlog

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCaptureAndWait(t *testing.T) {
	var l *Buffer
	before := slog.Default()
	t.Run("captured", func(t *testing.T) {
		l = Capture(t)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() { slog.Info("written", "n", i) })
		}
		go func() {
			time.Sleep(5 * time.Millisecond)
			slog.Warn("later")
		}()
		l.Wait(t, `level=WARN msg=later`, 10*time.Second)
		wg.Wait()
		if n := strings.Count(l.String(), "msg=written"); n != 4 {
			t.Fatalf("%d records of 4:\n%s", n, l.String())
		}
	})
	if slog.Default() != before {
		t.Fatal("the default logger was not put back")
	}
	slog.Info("after the test")
	if strings.Contains(l.String(), "after the test") {
		t.Fatal("a record after the test went to its buffer")
	}
}

// TestWaitFails checks Wait fails a test whose record never comes.
func TestWaitFails(t *testing.T) {
	var l Buffer
	_, _ = l.Write([]byte("msg=other\n"))
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine
		defer close(done)
		l.Wait(r, "msg=never", 10*time.Millisecond)
	}()
	<-done
	if !r.failed || !strings.Contains(r.msg, "msg=other") {
		t.Fatalf("Wait for a missing record: failed %v, %q", r.failed, r.msg)
	}
}

type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
