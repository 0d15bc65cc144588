package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/server"
)

const (
	operatorSecret = "operator-secret-0123456789"
	hostSecret     = "host-h1-secret-0123456789"
)

// controller serves the API over its own store on the database at url, as
// one of several sluice-controller processes would.
func controller(t *testing.T, url string) string {
	t.Helper()
	srv, err := server.New(server.Config{Store: open(t, url), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

func client(t *testing.T, url, secret string) *controllerapi.ClientWithResponses {
	t.Helper()
	c, err := controllerapi.NewClientWithResponses(url, controllerapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+secret)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Two controllers on one database, used at once: VMs created through both
// never overfill a GPU, and usage intervals pushed to both (the same
// intervals, as a host whose answers got lost would) are counted once.
func TestTwoControllersOnOneDatabase(t *testing.T) {
	url := newDatabase(t)
	st := open(t, url)
	ctx := context.Background()
	now := time.Now().UTC()
	for _, tok := range []fleet.Token{
		{ID: "op", Name: "op", Role: fleet.RoleOperator, Hash: auth.Hash(operatorSecret), Created: now},
		{ID: "h1", Name: "h1", Role: fleet.RoleHost, Host: "h1", Hash: auth.Hash(hostSecret), Created: now},
	} {
		if err := st.CreateToken(ctx, tok, fleet.Event{Time: now, Actor: "test", Action: "token.create", Target: tok.ID}); err != nil {
			t.Fatal(err)
		}
	}
	urls := []string{controller(t, url), controller(t, url)}
	ops := []*controllerapi.ClientWithResponses{client(t, urls[0], operatorSecret), client(t, urls[1], operatorSecret)}
	hosts := []*controllerapi.ClientWithResponses{client(t, urls[0], hostSecret), client(t, urls[1], hostSecret)}

	// Two GPUs of 4 GiB: room for eight VMs of 1 GiB.
	const gib = int64(1) << 30
	r, err := hosts[1].RegisterHostWithResponse(ctx, "h1", controllerapi.RegisterHostRequest{Address: "h1:1",
		Gpus: []controllerapi.GPUReport{{Index: 0, Model: "sim", MemoryBytes: 4 * gib}, {Index: 1, Model: "sim", MemoryBytes: 4 * gib}}})
	if err != nil || r.StatusCode() != http.StatusOK {
		t.Fatalf("register: %v %s", err, r.Body)
	}

	// Twenty VMs asked of both controllers at once: eight placed, twelve
	// refused for capacity.
	var created, full atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mem := gib
			r, err := ops[i%2].CreateVMWithResponse(ctx, controllerapi.CreateVMRequest{Name: fmt.Sprintf("vm%02d", i), Tenant: "acme", MemoryBytes: &mem})
			switch {
			case err != nil:
				t.Errorf("create vm%02d: %v", i, err)
			case r.StatusCode() == http.StatusCreated:
				created.Add(1)
			case r.StatusCode() == http.StatusConflict && r.JSONDefault != nil && r.JSONDefault.Code == controllerapi.NoCapacity:
				full.Add(1)
			default:
				t.Errorf("create vm%02d: %d %s", i, r.StatusCode(), r.Body)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 8 || full.Load() != 12 {
		t.Fatalf("%d created, %d refused for capacity; want 8 and 12", created.Load(), full.Load())
	}
	vms, err := st.ListVMs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	placed := map[int]int64{}
	for _, v := range vms {
		placed[v.GPU] += v.MemoryBytes
	}
	if len(vms) != 8 || placed[0] != 4*gib || placed[1] != 4*gib {
		t.Fatalf("%d VMs stored, quotas per GPU %v; want 8 and 4 GiB on each", len(vms), placed)
	}

	// The same 60 intervals pushed through both controllers by four
	// pushers: each stored once.
	var intervals []controllerapi.UsageInterval
	var want int64
	start := now.Truncate(time.Second)
	for seq := int64(1); seq <= 60; seq++ {
		k := seq
		intervals = append(intervals, controllerapi.UsageInterval{Vm: "vm00", Seq: seq, Start: start.Add(time.Duration(seq) * time.Second),
			End: start.Add(time.Duration(seq+1) * time.Second), GpuNs: 1000 * seq, Kernels: &k})
		want += 1000 * seq
	}
	var accepted, duplicates atomic.Int64
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < len(intervals); i += 7 {
				r, err := hosts[p%2].IngestUsageWithResponse(ctx, controllerapi.IngestUsageRequest{Host: "h1", Intervals: intervals[i:min(i+7, len(intervals))]})
				if err != nil || r.JSON200 == nil {
					t.Errorf("pusher %d at %d: %v %s", p, i, err, r.Body)
					return
				}
				accepted.Add(int64(r.JSON200.Accepted))
				duplicates.Add(int64(r.JSON200.Duplicates))
			}
		}()
	}
	wg.Wait()
	if accepted.Load() != 60 || duplicates.Load() != 180 {
		t.Fatalf("%d accepted, %d duplicates; want 60 and 180", accepted.Load(), duplicates.Load())
	}
	for i, op := range ops {
		vm := "vm00"
		r, err := op.QueryUsageWithResponse(ctx, &controllerapi.QueryUsageParams{Vm: &vm})
		if err != nil || r.JSON200 == nil {
			t.Fatalf("usage through controller %d: %v", i, err)
		}
		if r.JSON200.TotalGpuNs != want || len(r.JSON200.Intervals) != 60 {
			t.Fatalf("controller %d bills %d ns in %d intervals; want %d in 60", i, r.JSON200.TotalGpuNs, len(r.JSON200.Intervals), want)
		}
	}
}
