package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/server"
)

// Two stores on one database (two controllers) and several pushers each
// deliver the same intervals, in batches and in different orders: every
// interval is stored once, the accepted counts add up to the intervals, and
// the totals are exact.
func testConcurrentIngestionCountsOnce(t *testing.T, db DB) {
	stores := []Store{db.Open(t), db.Open(t)}
	ctx := context.Background()
	if err := stores[0].RegisterHost(ctx, hostWithGPUs("h1", 1<<30), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	const vms, perVM, batch = 3, 40, 8
	var all []fleet.UsageInterval
	var want int64
	for v := range vms {
		name := fmt.Sprintf("v%d", v)
		if err := stores[1].CreateVM(ctx, fleet.VM{Name: name, Tenant: "acme", Weight: 1, Host: "h1", Created: t0, Updated: t0}, ev("vm.create", name)); err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= perVM; seq++ {
			start := t0.Add(time.Duration(seq) * time.Second)
			u := fleet.UsageInterval{Host: "h1", VM: name, Seq: seq, Start: start, End: start.Add(time.Second), GPUNs: seq*1000 + int64(v), Kernels: seq}
			all = append(all, u)
			want += u.GPUNs
		}
	}
	var accepted, duplicates atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[p%2]
			order := slices.Clone(all)
			if p%4 >= 2 {
				slices.Reverse(order)
			}
			for i := 0; i < len(order); i += batch {
				a, d, err := s.IngestUsage(ctx, order[i:min(i+batch, len(order))])
				if err != nil {
					errc <- fmt.Errorf("pusher %d, batch at %d: %w", p, i, err)
					return
				}
				accepted.Add(int64(a))
				duplicates.Add(int64(d))
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if a, d := accepted.Load(), duplicates.Load(); a != int64(len(all)) || a+d != 8*int64(len(all)) {
		t.Fatalf("%d accepted, %d duplicates; want %d accepted of %d deliveries", a, d, len(all), 8*len(all))
	}
	for _, s := range stores {
		got, err := s.QueryUsage(ctx, fleet.UsageQuery{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, u := range got {
			sum += u.GPUNs
		}
		if len(got) != len(all) || sum != want {
			t.Fatalf("stored %d intervals, %d ns; want %d, %d ns", len(got), sum, len(all), want)
		}
	}
}

// Two stores create a VM of the same name at once: one succeeds, the others
// get fleet.ErrExists, and one vm.create event is recorded.
func testConcurrentCreateOfOneNameCreatesOnce(t *testing.T, db DB) {
	stores := []Store{db.Open(t), db.Open(t)}
	ctx := context.Background()
	if err := stores[0].RegisterHost(ctx, hostWithGPUs("h1", 1<<30, 1<<30), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	const tries = 6
	var created, exists atomic.Int32
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vm := fleet.VM{Name: "v", Tenant: "acme", Weight: 1, Host: "h1", GPU: i % 2, Created: t0, Updated: t0, Generation: 1}
			switch err := stores[i%2].CreateVM(ctx, vm, ev("vm.create", "v")); {
			case err == nil:
				created.Add(1)
			case errors.Is(err, fleet.ErrExists):
				exists.Add(1)
			default:
				t.Errorf("create %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 || exists.Load() != tries-1 {
		t.Fatalf("%d created, %d refused as existing; want 1 and %d", created.Load(), exists.Load(), tries-1)
	}
	evs, err := stores[1].ListEvents(ctx, time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Action == "vm.create" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d vm.create events, want 1", n)
	}
}

// A store that several controllers share (server.CapacityLocker) lets one
// capacity-dependent change run at a time across all of them. A store
// without it belongs to one controller process, whose mutex suffices.
func testCapacityLockExcludesAcrossStores(t *testing.T, db DB) {
	var lockers []server.CapacityLocker
	for range 2 {
		l, ok := db.Open(t).(server.CapacityLocker)
		if !ok {
			t.Skip("this store is owned by one controller process; it has no lock across processes")
		}
		lockers = append(lockers, l)
	}
	ctx := context.Background()
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				unlock, err := lockers[i%2].LockCapacity(ctx)
				if err != nil {
					t.Errorf("locking: %v", err)
					return
				}
				n := inside.Add(1)
				if n > most.Load() {
					most.Store(n)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d holders of the capacity lock at once, want 1", most.Load())
	}
	// A cancelled wait gives up with the context's error.
	unlock, err := lockers[0].LockCapacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if u, err := lockers[1].LockCapacity(cctx); err == nil {
		u()
		t.Fatal("took the capacity lock while another store held it")
	}
}
