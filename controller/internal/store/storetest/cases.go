package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

func testMigrationsApplyOnceAndSurviveReopen(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	if v, err := s.SchemaVersion(ctx); err != nil || v != db.Migrations {
		t.Fatalf("schema version %d, %v; want %d", v, err, db.Migrations)
	}
	if err := s.CreateToken(ctx, fleet.Token{ID: "a", Name: "n", Role: fleet.RoleOperator, Hash: []byte{1}, Created: t0}, ev("token.create", "a")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := db.Open(t) // migrating again must be a no-op, not a "table exists" error
	if n, err := s2.CountTokens(ctx); err != nil || n != 1 {
		t.Fatalf("tokens after reopen: %d, %v", n, err)
	}
}

func testTokensRevokeOnceAndLookUpByHash(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	tok := fleet.Token{ID: "t1", Name: "alice", Role: fleet.RoleTenant, Tenant: "acme", Hash: []byte("h1"), Created: t0, CreatedBy: "op"}
	if err := s.CreateToken(ctx, tok, ev("token.create", "t1")); err != nil {
		t.Fatal(err)
	}
	got, err := s.TokenByHash(ctx, []byte("h1"))
	if err != nil || got.ID != "t1" || got.Tenant != "acme" || got.Role != fleet.RoleTenant || !got.Revoked.IsZero() || !got.Created.Equal(t0) {
		t.Fatalf("TokenByHash = %+v, %v", got, err)
	}
	if _, err := s.TokenByHash(ctx, []byte("nope")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	if err := s.RevokeToken(ctx, "t1", t0.Add(time.Hour), ev("token.revoke", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx, "t1", t0.Add(2*time.Hour), ev("token.revoke", "t1")); err != nil {
		t.Fatal(err)
	}
	got, _ = s.TokenByHash(ctx, []byte("h1"))
	if !got.Revoked.Equal(t0.Add(time.Hour)) {
		t.Fatalf("revoked at %v, want the first revocation", got.Revoked)
	}
	if err := s.RevokeToken(ctx, "nope", t0, ev("token.revoke", "nope")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("revoking an unknown token: %v", err)
	}
	evs, _ := s.ListEvents(ctx, time.Time{}, 100)
	if len(evs) != 2 || evs[0].Action != "token.revoke" || evs[1].Action != "token.create" {
		t.Fatalf("events %+v: want one create and one revoke, newest first", evs)
	}
}

func testRegisterHostKeepsPlacedGPUs(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 100, 200), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	vm := fleet.VM{Name: "v", Tenant: "acme", Weight: 1, Host: "h1", GPU: 1, Created: t0, Updated: t0, Generation: 1}
	if err := s.CreateVM(ctx, vm, ev("vm.create", "v")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateVM(ctx, vm, ev("vm.create", "v")); !errors.Is(err, fleet.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	bad := vm
	bad.Name, bad.GPU = "w", 7
	if err := s.CreateVM(ctx, bad, ev("vm.create", "w")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("create on a GPU not in the inventory: %v", err)
	}
	// GPU 1 holds v: it may not go.
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 100), ev("host.register", "h1")); !errors.Is(err, fleet.ErrConflict) {
		t.Fatalf("dropping a GPU with a VM: %v", err)
	}
	h, err := s.Host(ctx, "h1")
	if err != nil || len(h.GPUs) != 2 {
		t.Fatalf("host after a refused register: %+v, %v", h, err)
	}
	// GPU 0 is free: a new inventory without it (and GPU 1 larger) is taken.
	h2 := hostWithGPUs("h1", 0, 300)
	h2.GPUs = h2.GPUs[1:]
	h2.Registered = t0.Add(time.Hour)
	if err := s.RegisterHost(ctx, h2, ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	h, _ = s.Host(ctx, "h1")
	if len(h.GPUs) != 1 || h.GPUs[0].Index != 1 || h.GPUs[0].MemoryBytes != 300 || !h.Registered.Equal(t0) {
		t.Fatalf("host after re-register: %+v", h)
	}
}

// testGPUInventoryFields: the PCI fields a host read from sysfs come back as
// stored, absent ("" and nil) apart from 0, and a registration replaces them.
func testGPUInventoryFields(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	n := func(v int) *int { return &v }
	h := hostWithGPUs("h1", 100, 200, 300)
	h.GPUs[0].PCIAddress, h.GPUs[0].NUMANode, h.GPUs[0].Driver, h.GPUs[0].IOMMUGroup = "0000:41:00.0", n(1), "nvidia", n(40)
	h.GPUs[0].SRIOVTotalVFs, h.GPUs[0].SRIOVNumVFs = n(16), n(2)
	h.GPUs[0].VFs = []fleet.VF{{Address: "0000:41:00.4", Driver: "vfio-pci"}, {Address: "0000:41:00.5"}}
	h.GPUs[1].PCIAddress, h.GPUs[1].NUMANode, h.GPUs[1].IOMMUGroup = "0000:c1:00.0", n(0), n(0)
	h.GPUs[1].SRIOVTotalVFs, h.GPUs[1].SRIOVNumVFs = n(0), n(0)
	// GPU 2: declared, nothing from sysfs.
	if err := s.RegisterHost(ctx, h, ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Host(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.GPUs, h.GPUs) {
		t.Fatalf("GPUs\n%+v\nwant\n%+v", got.GPUs, h.GPUs)
	}
	// Registering again replaces them: GPU 0 now declared.
	h2 := hostWithGPUs("h1", 100, 200, 300)
	if err := s.RegisterHost(ctx, h2, ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	hosts, err := s.ListHosts(ctx)
	if err != nil || len(hosts) != 1 || !reflect.DeepEqual(hosts[0].GPUs, h2.GPUs) {
		t.Fatalf("hosts %+v, %v: want GPUs %+v", hosts, err, h2.GPUs)
	}
}

func testHeartbeatAndMarkDown(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 1), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, "nope", t0, ev("host.up", "nope")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("heartbeat of an unknown host: %v", err)
	}
	// A heartbeat at t0+10s races a sweep that thinks t0+5s is stale: not down.
	if _, err := s.Heartbeat(ctx, "h1", t0.Add(10*time.Second), ev("host.up", "h1")); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.MarkDown(ctx, "h1", t0.Add(5*time.Second), ev("host.down", "h1")); err != nil || changed {
		t.Fatalf("MarkDown of a fresh host: %v, %v", changed, err)
	}
	if changed, err := s.MarkDown(ctx, "h1", t0.Add(time.Minute), ev("host.down", "h1")); err != nil || !changed {
		t.Fatalf("MarkDown of a stale host: %v, %v", changed, err)
	}
	if changed, _ := s.MarkDown(ctx, "h1", t0.Add(time.Minute), ev("host.down", "h1")); changed {
		t.Fatal("MarkDown twice changed twice")
	}
	if h, _ := s.Host(ctx, "h1"); !h.Down {
		t.Fatal("host not down")
	}
	if wasDown, err := s.Heartbeat(ctx, "h1", t0.Add(2*time.Minute), ev("host.up", "h1")); err != nil || !wasDown {
		t.Fatalf("heartbeat of a down host: %v, %v", wasDown, err)
	}
	if h, _ := s.Host(ctx, "h1"); h.Down || !h.LastHeartbeat.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("host after heartbeat: %+v", h)
	}
	evs, _ := s.ListEvents(ctx, time.Time{}, 10)
	var actions []string
	for _, e := range evs {
		actions = append(actions, e.Action)
	}
	if len(evs) != 3 || evs[0].Action != "host.up" || evs[1].Action != "host.down" {
		t.Fatalf("events %v, want host.up, host.down, host.register", actions)
	}
}

func testUsageIngestionIsIdempotentAcrossReopen(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 1), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateVM(ctx, fleet.VM{Name: "v", Tenant: "acme", Weight: 1, Host: "h1", Created: t0, Updated: t0}, ev("vm.create", "v")); err != nil {
		t.Fatal(err)
	}
	iv := func(seq int64, gpu int64) fleet.UsageInterval {
		start := t0.Add(time.Duration(seq) * time.Minute)
		return fleet.UsageInterval{Host: "h1", VM: "v", Seq: seq, Start: start, End: start.Add(time.Minute), GPUNs: gpu, Kernels: 2}
	}
	if a, d, err := s.IngestUsage(ctx, []fleet.UsageInterval{iv(1, 100), iv(2, 200)}); err != nil || a != 2 || d != 0 {
		t.Fatalf("first push: %d accepted, %d duplicates, %v", a, d, err)
	}
	// The same intervals again (a retry) and one new one: only the new one counts.
	if a, d, err := s.IngestUsage(ctx, []fleet.UsageInterval{iv(1, 100), iv(2, 200), iv(3, 300)}); err != nil || a != 1 || d != 2 {
		t.Fatalf("retry: %d accepted, %d duplicates, %v", a, d, err)
	}
	// A different measurement under a stored key fails the whole batch.
	var ie *fleet.IntervalError
	if _, _, err := s.IngestUsage(ctx, []fleet.UsageInterval{iv(4, 400), iv(2, 999)}); !errors.Is(err, fleet.ErrConflict) || !errors.As(err, &ie) || ie.Index != 1 {
		t.Fatalf("conflicting redelivery: %v", err)
	}
	// Of several conflicts, the first in the batch is named.
	if _, _, err := s.IngestUsage(ctx, []fleet.UsageInterval{iv(2, 999), iv(1, 999)}); !errors.As(err, &ie) || ie.Index != 0 {
		t.Fatalf("two conflicts: %v; want interval 0 named", err)
	}
	s.Close()
	s = db.Open(t)
	// After a restart the retry is still recognised.
	if a, d, err := s.IngestUsage(ctx, []fleet.UsageInterval{iv(3, 300)}); err != nil || a != 0 || d != 1 {
		t.Fatalf("retry after reopen: %d accepted, %d duplicates, %v", a, d, err)
	}
	got, err := s.QueryUsage(ctx, fleet.UsageQuery{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, u := range got {
		sum += u.GPUNs
		if u.Tenant != "acme" {
			t.Errorf("interval %d charged to %q", u.Seq, u.Tenant)
		}
	}
	if len(got) != 3 || sum != 600 {
		t.Fatalf("%d intervals, %d ns; want 3 (seq 4 was in a refused batch), 600 ns", len(got), sum)
	}
	// Time range: intervals that overlap [t0+2m, t0+3m) are seq 2 only.
	got, _ = s.QueryUsage(ctx, fleet.UsageQuery{From: t0.Add(2 * time.Minute), To: t0.Add(3 * time.Minute)})
	if len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("range query: %+v", got)
	}
	// A deleted VM's late interval is still charged to its tenant.
	if err := s.DeleteVM(ctx, "v", ev("vm.delete", "v")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.IngestUsage(ctx, []fleet.UsageInterval{iv(5, 50)}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.QueryUsage(ctx, fleet.UsageQuery{VM: "v", From: t0.Add(5 * time.Minute)})
	if len(got) != 1 || got[0].Tenant != "acme" {
		t.Fatalf("late interval of a deleted VM: %+v", got)
	}
}

func testUpdateAndDeleteVM(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 10, 10), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	vm := fleet.VM{Name: "v", Tenant: "acme", Weight: 1, Host: "h1", Created: t0, Updated: t0, Generation: 1}
	if err := s.CreateVM(ctx, vm, ev("vm.create", "v")); err != nil {
		t.Fatal(err)
	}
	vm.Weight, vm.Cap, vm.GPU, vm.Generation, vm.Tenant = 3, 0.5, 1, 2, "other"
	if err := s.UpdateVM(ctx, vm, ev("vm.update", "v")); err != nil {
		t.Fatal(err)
	}
	got, _ := s.VM(ctx, "v")
	if got.Weight != 3 || got.Cap != 0.5 || got.GPU != 1 || got.Generation != 2 || got.Tenant != "acme" {
		t.Fatalf("after update: %+v (tenant must not change)", got)
	}
	if list, _ := s.ListVMs(ctx, "other"); len(list) != 0 {
		t.Fatalf("tenant filter: %+v", list)
	}
	if err := s.DeleteVM(ctx, "v", ev("vm.delete", "v")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVM(ctx, "v", ev("vm.delete", "v")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if err := s.UpdateVM(ctx, vm, ev("vm.update", "v")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("update of a deleted VM: %v", err)
	}
	// The failed changes left no events behind.
	evs, _ := s.ListEvents(ctx, time.Time{}, 100)
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4 (register, create, update, delete)", len(evs))
	}
}

// testDrainAndDeleteHost: a host drains and undrains (an event each time it
// changes, none when it does not), keeps its draining through a
// registration, and is deleted with its GPUs only once no VM is placed on
// it; its usage stays.
func testDrainAndDeleteHost(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 100, 100), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.Host(ctx, "h1"); h.Draining {
		t.Fatal("a new host is draining")
	}
	if changed, err := s.SetDraining(ctx, "h1", true, ev("host.drain", "h1")); err != nil || !changed {
		t.Fatalf("drain: %v, %v", changed, err)
	}
	if changed, err := s.SetDraining(ctx, "h1", true, ev("host.drain", "h1")); err != nil || changed {
		t.Fatalf("drain twice: %v, %v", changed, err)
	}
	if _, err := s.SetDraining(ctx, "nope", true, ev("host.drain", "nope")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("draining an unknown host: %v", err)
	}
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 100, 100), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if hosts, err := s.ListHosts(ctx); err != nil || len(hosts) != 1 || !hosts[0].Draining {
		t.Fatalf("hosts after a registration of a draining host: %+v, %v", hosts, err)
	}
	for _, name := range []string{"b", "a"} {
		vm := fleet.VM{Name: name, Tenant: "acme", Weight: 1, Host: "h1", GPU: 1, Created: t0, Updated: t0, Generation: 1}
		if err := s.CreateVM(ctx, vm, ev("vm.create", name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.IngestUsage(ctx, []fleet.UsageInterval{{Host: "h1", VM: "a", Seq: 1, Start: t0, End: t0.Add(time.Second), GPUNs: 7}}); err != nil {
		t.Fatal(err)
	}
	err := s.DeleteHost(ctx, "h1", ev("host.delete", "h1"))
	if !errors.Is(err, fleet.ErrConflict) || !strings.Contains(err.Error(), "2 VM(s), a, b:") {
		t.Fatalf("deleting a host with VMs: %v; want a conflict naming a and b", err)
	}
	for _, name := range []string{"a", "b"} {
		if err := s.DeleteVM(ctx, name, ev("vm.delete", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteHost(ctx, "h1", ev("host.delete", "h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Host(ctx, "h1"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("a deleted host: %v", err)
	}
	if err := s.DeleteHost(ctx, "h1", ev("host.delete", "h1")); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	if u, err := s.QueryUsage(ctx, fleet.UsageQuery{VM: "a"}); err != nil || len(u) != 1 || u[0].Host != "h1" {
		t.Fatalf("usage of a deleted host: %+v, %v", u, err)
	}
	// The name may register again, as a new host with new GPUs.
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 300), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if h, err := s.Host(ctx, "h1"); err != nil || h.Draining || len(h.GPUs) != 1 || h.GPUs[0].MemoryBytes != 300 {
		t.Fatalf("host registered again: %+v, %v", h, err)
	}
	evs, _ := s.ListEvents(ctx, time.Time{}, 100)
	var actions []string
	for _, e := range evs {
		actions = append(actions, e.Action)
	}
	want := "host.register host.delete vm.delete vm.delete vm.create vm.create host.register host.drain host.register"
	if got := strings.Join(actions, " "); got != want {
		t.Fatalf("events, newest first:\n%s\nwant\n%s", got, want)
	}
}

// testEndpointsSurviveReopen: a host's report of its VMs' endpoints is
// stored (a restarted controller answers domain.xml), replaced whole by the
// next, and goes with its host.
func testEndpointsSurviveReopen(t *testing.T, db DB) {
	s := db.Open(t)
	ctx := context.Background()
	ep := func(vm, report string) fleet.Endpoint { return fleet.Endpoint{Host: "h1", VM: vm, Report: report} }
	if err := s.SetEndpoints(ctx, "h1", []fleet.Endpoint{ep("a", `{}`)}); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("endpoints of an unknown host: %v", err)
	}
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 100), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Endpoint(ctx, "h1", "a"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("an endpoint not reported: %v", err)
	}
	first := []fleet.Endpoint{ep("a", `{"vm":"a","endpoint":"/run/a.sock","vectors":3}`), ep("b", `{"vm":"b","endpoint":"/run/b.sock","vectors":1}`)}
	for range 2 { // the same report again changes nothing
		if err := s.SetEndpoints(ctx, "h1", first); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = db.Open(t)
	for _, want := range first {
		if got, err := s.Endpoint(ctx, "h1", want.VM); err != nil || got != want {
			t.Fatalf("endpoint of %s after reopen: %+v, %v; want %+v", want.VM, got, err, want)
		}
	}
	// The next report replaces the whole: a is gone, b changed.
	b2 := ep("b", `{"vm":"b","endpoint":"/run/b2.sock","vectors":1}`)
	if err := s.SetEndpoints(ctx, "h1", []fleet.Endpoint{b2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Endpoint(ctx, "h1", "a"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("an endpoint no longer reported: %v", err)
	}
	if got, err := s.Endpoint(ctx, "h1", "b"); err != nil || got != b2 {
		t.Fatalf("a changed endpoint: %+v, %v", got, err)
	}
	// No audit event: it is run-time state.
	if evs, _ := s.ListEvents(ctx, time.Time{}, 100); len(evs) != 1 {
		t.Fatalf("%d events, want the registration only", len(evs))
	}
	if err := s.DeleteHost(ctx, "h1", ev("host.delete", "h1")); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterHost(ctx, hostWithGPUs("h1", 100), ev("host.register", "h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Endpoint(ctx, "h1", "b"); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("an endpoint of a deleted host: %v", err)
	}
}
