package process_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
	"github.com/sluice-gpu/sluice/guest-agent/transport/process"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // deadlock guard only
	t.Cleanup(cancel)
	return ctx
}

// sockPath is short enough for sun_path, unlike a t.TempDir path.
func sockPath(t testing.TB) string {
	dir, err := os.MkdirTemp("", "sa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "vm.sock")
}

// endpoint is an ivshmem server over a memfd region; with a layout, a fake
// host serves it and the server's doorbells wake that host.
func endpoint(t testing.TB, layout *abi.LayoutConfig, vectors int) string {
	path, _ := endpointServer(t, layout, vectors)
	return path
}

// endpointServer is endpoint and its server.
func endpointServer(t testing.TB, layout *abi.LayoutConfig, vectors int) (string, *ivshmem.Server) {
	t.Helper()
	size := int64(abi.MinRegionSize)
	if layout != nil {
		size = int64(layout.RegionSize)
	}
	fd, err := shm.NewMemfd("sluice-test", size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	mem, err := shm.Map(fd, int(size))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shm.Unmap(mem) })
	kick := func() {}
	if layout != nil {
		h, err := sdktest.Serve(mem, sdktest.Config{Layout: *layout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		kick = h.Kick
	}
	path := sockPath(t)
	srv, err := ivshmem.NewServer(ivshmem.ServerConfig{
		SocketPath: path,
		ShmFD:      fd,
		Vectors:    vectors,
		// Without the Gosched the host goroutine that kick readies waits in
		// the runnext slot of this P, which the server's goroutine keeps
		// while blocked in epoll_wait until sysmon retakes it (20 µs to
		// 10 ms): round trips of ~150 µs instead of ~20 µs.
		OnDoorbell: func(int, uint64) { kick(); runtime.Gosched() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return path, srv
}

func TestEndToEnd(t *testing.T) {
	ctx := testCtx(t)
	layout := abi.DefaultLayoutConfig()
	path := endpoint(t, &layout, abi.Vectors(layout.Channels))
	tr, err := process.Dial(ctx, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := sdk.Open(tr)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if tr.ID() == d.HostPeer() {
		t.Errorf("guest peer id %d is the host's", tr.ID())
	}
	c, err := d.Channel(2)
	if err != nil {
		t.Fatal(err)
	}
	last, err := c.Submit(ctx, abi.Command{Op: abi.OpNop}, abi.Command{Op: abi.OpFence, Value: 11})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, last); err != nil || c.Fence() != 11 {
		t.Fatalf("Wait: %v, fence %d", err, c.Fence())
	}
	res, err := workload.Latency(ctx, c, workload.LatencyConfig{Count: 1000, Warmup: 100})
	if err != nil || res.Count != 1000 {
		t.Fatalf("latency through the endpoint: %+v, %v", res, err)
	}
	t.Logf("round trip through eventfd and the fake host: %+v ns", res.RoundTrip)
}

func TestDialFailures(t *testing.T) {
	ctx := testCtx(t)
	layout := abi.LayoutConfig{RegionSize: abi.MinRegionSize, Channels: 2, RingEntries: 8}
	t.Run("vectors disagree", func(t *testing.T) {
		path := endpoint(t, &layout, 6)
		_, err := process.Dial(ctx, path, 6)
		if !errors.Is(err, process.ErrVectors) {
			t.Fatalf("Dial: %v, want ErrVectors", err)
		}
	})
	t.Run("no header", func(t *testing.T) {
		path := endpoint(t, nil, 6)
		_, err := process.Dial(ctx, path, 0)
		if !errors.Is(err, sdk.ErrHeader) {
			t.Fatalf("Dial: %v, want ErrHeader", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		if _, err := process.Dial(ctx, sockPath(t), 0); err == nil {
			t.Fatal("Dial to nothing succeeded")
		}
	})
}

// The transport reports the server closing its connection (sluiced gone),
// and its own Close as no departure.
func TestDeparted(t *testing.T) {
	ctx := testCtx(t)
	layout := abi.DefaultLayoutConfig()
	path, srv := endpointServer(t, &layout, abi.Vectors(layout.Channels))
	tr, err := process.Dial(ctx, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.DepartErr(); err != nil {
		t.Fatalf("DepartErr while connected: %v", err)
	}
	srv.Close()
	select {
	case <-tr.Departed():
	case <-ctx.Done():
		t.Fatal("the server closed and the transport did not notice")
	}
	if err := tr.DepartErr(); !errors.Is(err, ivshmem.ErrServerGone) || errors.Is(err, sdk.ErrClosedHere) {
		t.Fatalf("DepartErr %v, want ErrServerGone", err)
	}

	path = endpoint(t, &layout, abi.Vectors(layout.Channels))
	tr2, err := process.Dial(ctx, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr2.Close()
	<-tr2.Departed()
	if err := tr2.DepartErr(); !errors.Is(err, sdk.ErrClosedHere) {
		t.Fatalf("DepartErr after Close: %v, want ErrClosedHere", err)
	}
}

// BenchmarkRoundTrip is one NOP round trip through the ivshmem server's
// eventfd doorbell and a fake host.
func BenchmarkRoundTrip(b *testing.B) {
	layout := abi.DefaultLayoutConfig()
	path := endpoint(b, &layout, abi.Vectors(layout.Channels))
	tr, err := process.Dial(b.Context(), path, 0)
	if err != nil {
		b.Fatal(err)
	}
	d, err := sdk.Open(tr)
	if err != nil {
		tr.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	c, _ := d.Channel(0)
	for b.Loop() {
		last, err := c.Submit(b.Context(), abi.Command{Op: abi.OpNop})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Wait(b.Context(), last); err != nil {
			b.Fatal(err)
		}
	}
}
