package channel

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
)

// TestFailuresLoggedAtMostOnceASecond: a channel's failure is logged with
// its error and record; a guest failing and resetting in a loop gets one
// line a second, the next one counting the failures not logged.
func TestFailuresLoggedAtMostOnceASecond(t *testing.T) {
	r := newRig(t)
	var buf bytes.Buffer
	r.ch.SetLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for i := uint32(1); i <= 5; i++ {
		r.writeRaw(abi.Record{}) // ErrBadOpcode
		r.ch.Poll()
		r.region.Store32(r.layout.ChannelOff(1)+abi.ChReset, i)
		r.ch.Poll()
		if r.host32(abi.ChResetAck) != i {
			t.Fatalf("reset %d not acknowledged", i)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `msg="channel failed" channel=1 error=`) ||
		!strings.Contains(lines[0], abi.ErrBadOpcode.String()) || !strings.Contains(lines[0], "record=0 not_logged_since=0") {
		t.Fatalf("log after 5 failures in a row:\n%s", buf.String())
	}
	r.ch.mu.Lock()
	r.ch.failLogged -= failLogEvery // a second later
	r.ch.mu.Unlock()
	r.writeRaw(abi.Record{})
	r.ch.Poll()
	if !strings.Contains(buf.String(), "record=5 not_logged_since=4") {
		t.Fatalf("the next line a second later:\n%s", buf.String())
	}
}
