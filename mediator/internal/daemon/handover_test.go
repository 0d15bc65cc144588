package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/workload"
)

// A guest running throttle kernels (four in flight) across a hand-over
// finishes without an error, and the successor bills its VM every kernel
// once: the ledger the predecessor settled plus what the successor ran,
// the kernels in flight at the hand-over included once.
func TestHandoverAdopt(t *testing.T) {
	const kernel, kernels = 200 * time.Microsecond, 400
	cfg := DefaultConfig()
	dir := t.TempDir()
	cfg.Socket, cfg.StateDir, cfg.Proxy.Binary = filepath.Join(dir, "sluiced.sock"), filepath.Join(dir, "state"), "off"
	cfg.HandoverWait = 0 // the kernels in flight run again in the successor
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ch := channel(t, guest(t, createVM(t, d, "a")), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type outcome struct {
		r   workload.ThrottleResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := workload.Throttle(ctx, ch, workload.ThrottleConfig{Kernel: kernel, Kernels: kernels, Depth: 4})
		done <- outcome{r, err}
	}()
	waitFor(t, func() bool { u := usageOf(t, d, "a"); return u.Kernels >= kernels/4 })
	m, err := d.Handover(cfg.HandoverWait)
	if err != nil {
		t.Fatalf("Handover: %v", err)
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if m, err = DecodeManifest(b, -1); err != nil {
		t.Fatalf("DecodeManifest: %v", err)
	}
	d2, err := Adopt(cfg, m)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	defer d2.Close()
	if v, _ := d2.Version(ctx); v.Epoch != d.Epoch() || v.Handovers != 1 {
		t.Fatalf("version %+v after the hand-over, want epoch %#x, 1 hand-over", v, d.Epoch())
	}
	o := <-done
	if o.err != nil || o.r.Errors != 0 || o.r.Kernels != kernels {
		t.Fatalf("the guest across the hand-over: %+v, %v", o.r, o.err)
	}
	u := usageOf(t, d2, "a")
	if u.Kernels != kernels || u.GPUNs != kernels*uint64(kernel) || u.Errors != 0 {
		t.Fatalf("billed %+v, want %d kernels of %v", u, kernels, kernel)
	}
}

// A manifest names each descriptor once, none of the standard streams nor
// its own, and only open ones; VM names and ids are valid and unique.
func TestDecodeManifestRefuses(t *testing.T) {
	open := []int{openFD(t), openFD(t), openFD(t)}
	cases := map[string]string{
		"version":     `{"version":2,"lock":` + itoa(open[0]) + `}`,
		"stdin":       `{"version":1,"lock":0}`,
		"self":        `{"version":1,"lock":` + itoa(open[1]) + `}`,
		"closed":      `{"version":1,"lock":1000000}`,
		"repeated":    `{"version":1,"lock":` + itoa(open[0]) + `,"host_api":` + itoa(open[0]) + `}`,
		"bad name":    `{"version":1,"lock":` + itoa(open[0]) + `,"next_id":5,"vms":[{"name":"../x","id":1,"vm":{"memfd":` + itoa(open[2]) + `}}]}`,
		"id past":     `{"version":1,"lock":` + itoa(open[0]) + `,"next_id":1,"vms":[{"name":"a","id":1,"vm":{"memfd":` + itoa(open[2]) + `}}]}`,
		"not json":    `{"version":1,`,
		"repeated vm": `{"version":1,"lock":` + itoa(open[0]) + `,"next_id":5,"vms":[{"name":"a","id":1},{"name":"a","id":2}]}`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeManifest([]byte(doc), open[1]); !errors.Is(err, ErrBadManifest) {
				t.Fatalf("DecodeManifest: %v, want ErrBadManifest", err)
			}
		})
	}
	ok := `{"version":1,"lock":` + itoa(open[0]) + `,"host_api":` + itoa(open[1]) + `}`
	if _, err := DecodeManifest([]byte(ok), -1); err != nil {
		t.Fatalf("a good manifest: %v", err)
	}
}

// Whatever DecodeManifest accepts names each descriptor once, past the
// standard streams.
func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"version":1,"lock":3,"next_id":2,"vms":[{"name":"a","id":1,"vm":{"memfd":4,"server":{"listener":5,"shm":6,"host":[7,8]}}}]}`))
	f.Add([]byte(`{"version":1,"lock":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b, 9)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, fd := range m.FDs() {
			if fd < 3 || fd == 9 || seen[fd] {
				t.Fatalf("accepted fd %d twice, or a standard stream, or its own: %s", fd, b)
			}
			seen[fd] = true
		}
	})
}

// openFD opens a descriptor closed at cleanup.
func openFD(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

func itoa(i int) string { return strconv.Itoa(i) }
