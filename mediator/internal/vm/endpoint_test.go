package vm

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/internal/testlog"
)

// TestRefusalsCountedAndLogged: connections refused by the endpoint are
// counted by why, and logged with the VM's name and the peer's pid and uid,
// one line a second.
func TestRefusalsCountedAndLogged(t *testing.T) {
	every := refuseLogEvery
	refuseLogEvery = time.Hour // the test's refusals all fall in one period
	t.Cleanup(func() { refuseLogEvery = every })
	logs := testlog.Capture(t)
	l, err := abi.NewLayout(abi.LayoutConfig{RegionSize: 1 << 20, Channels: 1, RingEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{Name: "guarded", ID: 1, Weight: 1, Layout: l, Limits: abi.DefaultLimits(),
		Socket: filepath.Join(t.TempDir(), "g.sock"), MaxPeers: 1, HandshakeTimeout: 100 * time.Millisecond},
		backendOf{&instantGPU{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })

	// Never reads its handshake.
	stuck, err := net.Dial("unix", v.Config().Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	waitFor(t, "the non-reader refused", func() bool { return v.Refusals().NoHandshake == 1 })
	line := fmt.Sprintf(`msg="guest connection refused" vm=guarded pid=%d uid=%d`, os.Getpid(), os.Geteuid())
	waitFor(t, "a log line with "+line, func() bool { return strings.Contains(logs.String(), line) })

	dial(t, v) // joins, the only slot
	waitFor(t, "the guest joined", func() bool { return len(v.Peers()) == 1 })
	for range 2 {
		extra, err := net.Dial("unix", v.Config().Socket)
		if err != nil {
			t.Fatal(err)
		}
		extra.Close()
	}
	waitFor(t, "both extra guests refused", func() bool { return v.Refusals().Full == 2 })
	if got := v.Refusals(); got != (Refusals{NoHandshake: 1, Full: 2}) {
		t.Fatalf("Refusals() = %+v", got)
	}
	if n := strings.Count(logs.String(), "guest connection refused"); n != 1 {
		t.Fatalf("%d refusal lines within a period, want 1:\n%s", n, logs.String())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
