package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/testlog"
)

// TestLifecycleLogged: the daemon logs a VM's creation, a guest joining and
// leaving, the VM's deletion, and its restoration after a restart, each
// line naming the VM.
func TestLifecycleLogged(t *testing.T) {
	buf := testlog.Capture(t)

	state := t.TempDir()
	d := newDaemon(t, "virtual", state)
	ctx := context.Background()
	for _, name := range []string{"kept", "gone"} {
		if _, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	vm, err := d.GetVM(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	g := guest(t, vm)
	// A guest joins once the server sees it has read its handshake.
	for deadline := time.Now().Add(5 * time.Second); vm.Peers == 0; time.Sleep(time.Millisecond) {
		if vm, err = d.GetVM(ctx, "gone"); err != nil || time.Now().After(deadline) {
			t.Fatalf("the guest never joined (%v)", err)
		}
	}
	g.Close()
	if err := d.DeleteVM(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	newDaemon(t, "virtual", state)

	want := []string{
		`msg="vm created" vm=kept`, `msg="vm created" vm=gone`,
		`msg="guest joined" vm=gone peer=`, `msg="guest left" vm=gone peer=`,
		`msg="vm deleted" vm=gone`, `msg="vm restored" vm=kept`,
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, w := range want {
		for !strings.Contains(buf.String(), w) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line with %q in:\n%s", w, buf.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if strings.Contains(buf.String(), `msg="vm restored" vm=gone`) {
		t.Error("a deleted vm was restored")
	}
}

// TestWakesInStats: signals to a guest asleep on its wake word show in the
// VM's stats, per channel and in all, and so do the record's latencies.
func TestWakesInStats(t *testing.T) {
	d := newDaemon(t, "wall", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vm, err := d.CreateVM(ctx, hostapi.CreateVMRequest{Name: "sleepy", Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := guest(t, vm).Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := ch.Submit(ctx, abi.Command{Op: abi.OpThrottle, DurationNs: 20e6})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Wait(ctx, idx); err != nil {
		t.Fatal(err)
	}
	if ch.Sleeps() == 0 {
		t.Fatal("the guest never slept on a 20 ms command (its spin is 50 us)")
	}
	st, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st.VMs {
		if v.Name == "sleepy" {
			if v.Wakes == 0 || len(v.ChannelStats) != 1 || v.ChannelStats[0].Wakes != v.Wakes {
				t.Fatalf("wakes %d, channel %+v; want the signal counted", v.Wakes, v.ChannelStats)
			}
			// The command's latencies: forwarded at once, done after its 20 ms.
			if d, r := v.Dispatch, v.Turnaround; d.Count != 1 || r.Count != 1 || r.SumNs < 20e6 || d.SumNs > r.SumNs ||
				len(r.Counts) != len(r.BoundsNs)+1 {
				t.Fatalf("dispatch %+v, turnaround %+v; want one record each, turnaround >= 20 ms", d, r)
			}
			return
		}
	}
	t.Fatal("vm not in stats")
}
