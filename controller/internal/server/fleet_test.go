package server

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

func place(vm controllerapi.VM) string { return fmt.Sprintf("%s/%d", vm.Host, vm.Gpu) }

func TestPlacementSpreadAndPack(t *testing.T) {
	e := newEnv(t)
	e.registerHost("h1", 16*gib, 16*gib)
	e.registerHost("h2", 8*gib)
	var got []string
	for i := range 3 {
		got = append(got, place(e.createVM(e.op, fmt.Sprintf(`{"name":"s%d","tenant":"acme","memory_bytes":%d}`, i, 2*gib))))
	}
	if strings.Join(got, " ") != "h1/0 h1/1 h2/0" {
		t.Fatalf("spread placed %v, want one VM per GPU", got)
	}
	got = nil
	for i := range 3 {
		got = append(got, place(e.createVM(e.op, fmt.Sprintf(`{"name":"p%d","tenant":"acme","memory_bytes":%d,"placement":"pack"}`, i, 2*gib))))
	}
	// pack: every GPU holds one VM; the fullest in memory is h2/0 (6 GiB
	// free), until its VM slots (4 in this test) are used up.
	if strings.Join(got, " ") != "h2/0 h2/0 h2/0" {
		t.Fatalf("pack placed %v", got)
	}
	// h2/0 is full (4 VMs): the next pack goes to h1.
	if p := place(e.createVM(e.op, `{"name":"p3","tenant":"acme","placement":"pack"}`)); !strings.HasPrefix(p, "h1/") {
		t.Fatalf("pack after h2/0 filled: %s", p)
	}
	// An operator may pin the host.
	if p := place(e.createVM(e.op, `{"name":"pinned","tenant":"acme","host":"h1"}`)); !strings.HasPrefix(p, "h1/") {
		t.Fatalf("pinned to h1: %s", p)
	}
	// Too much memory anywhere: 409 no_capacity naming memory_bytes.
	r := e.do("POST", "/v1/vms", e.op, fmt.Sprintf(`{"name":"huge","tenant":"acme","memory_bytes":%d}`, 15*gib))
	if r.status != 409 || r.apiError(t).Code != "no_capacity" || r.field() != "memory_bytes" {
		t.Fatalf("huge VM: %d %s", r.status, r.body)
	}
	// The same name twice: 409 exists.
	if r := e.do("POST", "/v1/vms", e.op, `{"name":"s0","tenant":"acme"}`); r.status != 409 || r.apiError(t).Code != "exists" {
		t.Fatalf("duplicate name: %d %s", r.status, r.body)
	}
	// A tenant may not pin a host.
	if r := e.do("POST", "/v1/vms", e.acme, `{"name":"t","tenant":"acme","host":"h1"}`); r.status != 403 || r.field() != "host" {
		t.Fatalf("tenant pinning a host: %d %s", r.status, r.body)
	}
	var gpus []controllerapi.GPU
	e.must(200, "GET", "/v1/gpus", e.op, "", &gpus)
	if len(gpus) != 3 || gpus[2].Host != "h2" || gpus[2].Vms != 4 || gpus[2].MemoryPlacedBytes != 8*gib {
		t.Fatalf("GPU inventory: %+v", gpus)
	}
}

func TestHostMissingHeartbeatsIsDownAndItsVMsFlagged(t *testing.T) {
	e := newEnv(t)
	e.registerHost("h1", 8*gib)
	e.registerHost("h2", 8*gib)
	vm := e.createVM(e.op, `{"name":"web","tenant":"acme","host":"h1"}`)
	// h2 keeps heartbeating; h1 falls silent past the 30 s timeout.
	e.clock.Advance(20 * time.Second)
	e.must(200, "POST", "/v1/hosts/h2/heartbeat", e.op, "", nil)
	e.clock.Advance(20 * time.Second)
	// No sweep has run: the read itself marks h1 down and logs it.
	var h controllerapi.Host
	e.must(200, "GET", "/v1/hosts/h1", e.op, "", &h)
	if h.State != controllerapi.Down || h.Vms != 1 {
		t.Fatalf("h1: %+v, want down with 1 VM", h)
	}
	e.must(200, "GET", "/v1/hosts/h2", e.op, "", &h)
	if h.State != controllerapi.Up {
		t.Fatalf("h2: %+v, want up", h)
	}
	e.must(200, "GET", "/v1/vms/web", e.acme, "", &vm)
	if !vm.HostDown {
		t.Fatal("a VM on a down host is not flagged")
	}
	// New VMs avoid the down host.
	if p := place(e.createVM(e.op, `{"name":"new","tenant":"acme"}`)); p != "h2/0" {
		t.Fatalf("placed on %s while h1 is down", p)
	}
	if err := e.srv.Sweep(context.Background()); err != nil { // a sweep after the read adds nothing
		t.Fatal(err)
	}
	// The host token heartbeats again: up, flag cleared, and told its VMs.
	var ds controllerapi.DesiredState
	e.must(200, "POST", "/v1/hosts/h1/heartbeat", e.h1, "", &ds)
	if ds.Host.State != controllerapi.Up || len(ds.Vms) != 1 || ds.Vms[0].Name != "web" {
		t.Fatalf("heartbeat answer: %+v", ds)
	}
	e.must(200, "GET", "/v1/vms/web", e.acme, "", &vm)
	if vm.HostDown {
		t.Fatal("flag not cleared after the heartbeat")
	}
	var evs []controllerapi.Event
	e.must(200, "GET", "/v1/events?limit=3", e.op, "", &evs)
	if len(evs) != 3 || evs[0].Action != "host.up" || evs[0].Actor != "h1-sluiced (token "+tokenID(t, e, e.h1)+")" ||
		evs[2].Action != "host.down" || evs[2].Actor != "controller" || !strings.Contains(*evs[2].Detail, "1 VMs flagged") {
		t.Fatalf("events: %+v", evs)
	}
	// An unknown host's heartbeat is 404.
	if r := e.do("POST", "/v1/hosts/h9/heartbeat", e.op, ""); r.status != 404 {
		t.Fatalf("heartbeat of an unknown host: %d", r.status)
	}
}

func tokenID(t *testing.T, e *env, secret string) string {
	var who controllerapi.WhoAmI
	e.must(200, "GET", "/v1/whoami", secret, "", &who)
	return who.TokenId
}

func TestUpdateMoveAndDeleteVM(t *testing.T) {
	e := newEnv(t)
	e.registerHost("h1", 8*gib)
	e.registerHost("h2", 8*gib)
	vm := e.createVM(e.acme, `{"name":"web","tenant":"acme","weight":2,"cap":0.5,"memory_bytes":1073741824}`)
	if vm.Weight != 2 || vm.Cap != 0.5 || vm.MemoryBytes != gib || vm.Generation != 1 {
		t.Fatalf("created %+v", vm)
	}
	e.must(200, "PATCH", "/v1/vms/web", e.acme, `{"weight":3,"memory_bytes":4294967296}`, &vm)
	if vm.Weight != 3 || vm.Cap != 0.5 || vm.MemoryBytes != 4*gib || vm.Generation != 2 {
		t.Fatalf("updated %+v", vm)
	}
	// The host sees the change in its desired state.
	var ds controllerapi.DesiredState
	e.must(200, "POST", "/v1/hosts/"+vm.Host+"/heartbeat", e.op, "", &ds)
	if len(ds.Vms) != 1 || ds.Vms[0].Weight != 3 || ds.Vms[0].Generation != 2 {
		t.Fatalf("desired state %+v", ds)
	}
	for body, field := range map[string]string{
		`{"weight":0}`:                 "weight",
		`{"cap":1.5}`:                  "cap",
		`{"memory_bytes":-1}`:          "memory_bytes",
		`{"memory_bytes":10737418240}`: "memory_bytes", // past the GPU: 409
		`{}`:                           "",
	} {
		if r := e.do("PATCH", "/v1/vms/web", e.acme, body); r.status/100 != 4 || r.field() != field {
			t.Errorf("PATCH %s: %d %s, want 4xx naming %q", body, r.status, r.body, field)
		}
	}
	from := vm.Host
	e.must(200, "POST", "/v1/vms/web/move", e.op, `{}`, &vm)
	if vm.Host == from || vm.Generation != 3 {
		t.Fatalf("moved %+v, from %s", vm, from)
	}
	if r := e.do("POST", "/v1/vms/web/move", e.op, `{"host":"`+vm.Host+`","gpu":0}`); r.status != 409 || r.apiError(t).Code != "no_capacity" {
		t.Fatalf("move onto its own GPU: %d %s", r.status, r.body)
	}
	e.must(204, "DELETE", "/v1/vms/web", e.acme, "", nil)
	if r := e.do("GET", "/v1/vms/web", e.acme, ""); r.status != 404 {
		t.Fatalf("after delete: %d", r.status)
	}
	var evs []controllerapi.Event
	e.must(200, "GET", "/v1/events?limit=4", e.op, "", &evs)
	var actions []string
	for _, ev := range evs {
		actions = append(actions, ev.Action+" by "+strings.Fields(ev.Actor)[0])
	}
	if strings.Join(actions, ", ") != "vm.delete by acme-bot, vm.move by ops, vm.update by acme-bot, vm.create by acme-bot" {
		t.Fatalf("events: %v", actions)
	}
}

func TestTokensCreateUseRevoke(t *testing.T) {
	e := newEnv(t)
	var nt controllerapi.NewToken
	e.must(201, "POST", "/v1/tokens", e.op, `{"name":"carol","role":"tenant","tenant":"acme"}`, &nt)
	if !strings.HasPrefix(nt.Secret, "slc_") || nt.Token.Role != "tenant" || *nt.Token.Tenant != "acme" {
		t.Fatalf("new token %+v", nt)
	}
	var who controllerapi.WhoAmI
	e.must(200, "GET", "/v1/whoami", nt.Secret, "", &who)
	if who.Name != "carol" || who.TokenId != nt.Token.Id || who.Version != "test" {
		t.Fatalf("whoami %+v", who)
	}
	var toks []controllerapi.Token
	r := e.do("GET", "/v1/tokens", e.op, "")
	if strings.Contains(string(r.body), nt.Secret) {
		t.Fatal("the token list shows a secret")
	}
	e.must(200, "GET", "/v1/tokens", e.op, "", &toks)
	if len(toks) != 6 {
		t.Fatalf("%d tokens, want 6", len(toks))
	}
	e.must(204, "DELETE", "/v1/tokens/"+nt.Token.Id, e.op, "", nil)
	if r := e.do("GET", "/v1/whoami", nt.Secret, ""); r.status != 401 {
		t.Fatalf("revoked token: %d", r.status)
	}
	if r := e.do("DELETE", "/v1/tokens/nosuch", e.op, ""); r.status != 404 || r.field() != "id" {
		t.Fatalf("revoking an unknown token: %d %s", r.status, r.body)
	}
	for body, field := range map[string]string{
		`{"name":"x","role":"tenant"}`:                "tenant",
		`{"name":"x","role":"operator","tenant":"a"}`: "tenant",
		`{"name":"x","role":"host"}`:                  "host",
		`{"name":"x","role":"king"}`:                  "role",
		`{"role":"operator"}`:                         "name",
		`{"name":"x","role":"tenant","tenant":"a b"}`: "tenant",
	} {
		if r := e.do("POST", "/v1/tokens", e.op, body); r.status != 400 || r.field() != field {
			t.Errorf("POST /v1/tokens %s: %d %s, want 400 naming %q", body, r.status, r.body, field)
		}
	}
	var evs []controllerapi.Event
	e.must(200, "GET", "/v1/events?limit=2", e.op, "", &evs)
	if evs[0].Action != "token.revoke" || evs[0].Target != nt.Token.Id || evs[1].Action != "token.create" ||
		strings.Contains(*evs[1].Detail, nt.Secret) || !strings.HasPrefix(evs[0].Actor, "ops (token ") {
		t.Fatalf("events %+v", evs)
	}
}

func usageBody(host string, seqs ...int64) string {
	var ivs []string
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, s := range seqs {
		start := t0.Add(time.Duration(s) * time.Minute)
		ivs = append(ivs, fmt.Sprintf(`{"vm":"web","seq":%d,"start":"%s","end":"%s","gpu_ns":%d,"kernels":%d}`,
			s, start.Format(time.RFC3339), start.Add(time.Minute).Format(time.RFC3339), 1000*(s+1), s+1))
	}
	return fmt.Sprintf(`{"host":"%s","intervals":[%s]}`, host, strings.Join(ivs, ","))
}

func TestUsageIngestionIsIdempotentAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	e.registerHost("h1", 8*gib)
	e.createVM(e.op, `{"name":"web","tenant":"acme"}`)
	e.createVM(e.op, `{"name":"db","tenant":"other"}`)
	var rep controllerapi.IngestReport
	e.must(200, "POST", "/v1/usage", e.h1, usageBody("h1", 0, 1), &rep)
	if rep.Accepted != 2 || rep.Duplicates != 0 {
		t.Fatalf("first push %+v", rep)
	}
	// The same interval again (an at-least-once retry): counted once.
	e.must(200, "POST", "/v1/usage", e.h1, usageBody("h1", 1), &rep)
	if rep.Accepted != 0 || rep.Duplicates != 1 {
		t.Fatalf("retry %+v", rep)
	}
	// The controller restarts on the same database.
	e.stop()
	e.start()
	e.must(200, "POST", "/v1/usage", e.h1, usageBody("h1", 1, 2), &rep)
	if rep.Accepted != 1 || rep.Duplicates != 1 {
		t.Fatalf("retry after a restart %+v", rep)
	}
	// Other content under a stored key: 409 naming the interval, nothing taken.
	bad := strings.Replace(usageBody("h1", 3, 2), `"gpu_ns":3000`, `"gpu_ns":9999`, 1)
	if r := e.do("POST", "/v1/usage", e.h1, bad); r.status != 409 || r.apiError(t).Code != "conflict" || r.field() != "intervals[1]" {
		t.Fatalf("conflicting redelivery: %d %s", r.status, r.body)
	}
	// Counters never go backwards.
	neg := strings.Replace(usageBody("h1", 4), `"gpu_ns":5000`, `"gpu_ns":-5`, 1)
	if r := e.do("POST", "/v1/usage", e.h1, neg); r.status != 400 || r.field() != "intervals[0].gpu_ns" {
		t.Fatalf("negative usage: %d %s", r.status, r.body)
	}
	// Times the store cannot hold exactly are refused, not mangled (a
	// mangled time would make the redelivery of the interval a conflict).
	old := strings.Replace(usageBody("h1", 5), "2026-11-01T12:05:00Z", "0001-01-01T00:00:01Z", 1)
	if r := e.do("POST", "/v1/usage", e.h1, old); r.status != 400 || r.field() != "intervals[0].start" {
		t.Fatalf("year 1 interval: %d %s", r.status, r.body)
	}
	var u controllerapi.UsageReport
	e.must(200, "GET", "/v1/usage?vm=web", e.acme, "", &u)
	if len(u.Intervals) != 3 || u.TotalGpuNs != 1000+2000+3000 || u.TotalKernels != 6 || u.Intervals[0].Tenant != "acme" {
		t.Fatalf("usage %+v", u)
	}
	// By time range: [12:01, 12:02) overlaps seq 1 only.
	e.must(200, "GET", "/v1/usage?tenant=acme&from=2026-11-01T12:01:00Z&to=2026-11-01T12:02:00Z", e.op, "", &u)
	if len(u.Intervals) != 1 || u.Intervals[0].Seq != 1 {
		t.Fatalf("range %+v", u)
	}
	// Another tenant's query sees none of it.
	e.must(200, "GET", "/v1/usage", e.other, "", &u)
	if len(u.Intervals) != 0 {
		t.Fatalf("tenant other sees %+v", u)
	}
	r := e.do("GET", "/v1/usage.csv?tenant=acme", e.acme, "")
	rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
	if r.status != 200 || err != nil || len(rows) != 4 || strings.Join(rows[0], ",") != strings.Join(CSVHeader, ",") ||
		strings.Join(rows[1], ",") != "h1,web,acme,0,2026-11-01T12:00:00Z,2026-11-01T12:01:00Z,1000,1" {
		t.Fatalf("CSV %d %q %v", r.status, r.body, err)
	}
}

func TestRegisterHostInventory(t *testing.T) {
	e := newEnv(t)
	// A host token registers its own host.
	var h controllerapi.Host
	e.must(200, "PUT", "/v1/hosts/h1", e.h1, `{"address":"10.0.0.1:7071","version":"v1","gpus":[{"index":0,"model":"H100","memory_bytes":85899345920}]}`, &h)
	if h.State != controllerapi.Up || len(h.Gpus) != 1 || h.Gpus[0].Model != "H100" || *h.Version != "v1" {
		t.Fatalf("registered %+v", h)
	}
	e.createVM(e.op, `{"name":"web","tenant":"acme"}`)
	// The GPU holding web may not leave the inventory.
	if r := e.do("PUT", "/v1/hosts/h1", e.h1, `{"address":"a","gpus":[]}`); r.status != 409 || r.field() != "gpus" {
		t.Fatalf("dropping a used GPU: %d %s", r.status, r.body)
	}
	for body, field := range map[string]string{
		`{"address":"a"}`: "gpus",
		`{"gpus":[]}`:     "address",
		`{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":1},{"index":0,"model":"m","memory_bytes":1}]}`: "gpus[1].index",
		`{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":0}]}`:                                          "gpus[0].memory_bytes",
		`{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":1,"numa_node":-1}]}`:                           "gpus[0].numa_node",
		`{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":1,"vfs":[{"address":""}]}]}`:                   "gpus[0].vfs[0].address",
	} {
		if r := e.do("PUT", "/v1/hosts/h1", e.h1, body); r.status != 400 || r.field() != field {
			t.Errorf("PUT %s: %d %s, want 400 naming %q", body, r.status, r.body, field)
		}
	}
	// The sysfs fields come back as reported; absent stays absent, 0 stays 0.
	e.must(200, "PUT", "/v1/hosts/h1", e.h1, `{"address":"a","gpus":[{"index":0,"model":"H100","memory_bytes":1,`+
		`"pci_address":"0000:41:00.0","numa_node":0,"driver":"nvidia","iommu_group":40,"sriov_totalvfs":16,"sriov_numvfs":2,`+
		`"vfs":[{"address":"0000:41:00.4","driver":"vfio-pci"},{"address":"0000:41:00.5"}]}]}`, &h)
	var gpus []controllerapi.GPU
	e.must(200, "GET", "/v1/gpus", e.op, "", &gpus)
	if b, _ := json.Marshal(gpus); string(b) != `[{"driver":"nvidia","host":"h1","index":0,"iommu_group":40,"memory_bytes":1,`+
		`"memory_placed_bytes":0,"model":"H100","numa_node":0,"pci_address":"0000:41:00.0","sriov_numvfs":2,"sriov_totalvfs":16,`+
		`"vfs":[{"address":"0000:41:00.4","driver":"vfio-pci"},{"address":"0000:41:00.5"}],"vms":1}]` {
		t.Errorf("GET /v1/gpus: %s", b)
	}
	if r := e.do("PUT", "/v1/hosts/bad%20name", e.op, `{"address":"a","gpus":[]}`); r.status != 400 || r.field() != "name" {
		t.Errorf("bad host name: %d %s", r.status, r.body)
	}
}
