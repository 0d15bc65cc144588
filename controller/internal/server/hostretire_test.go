package server

import (
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// A draining host takes no new VMs, by spread, by pack or named, nor moves
// onto it; its VMs stay until moved. It is deleted once empty, and only by
// an operator; every change is in the audit log.
func TestDrainAndDeleteHost(t *testing.T) {
	e := newEnv(t)
	e.registerHost("h1", 8*gib)
	e.registerHost("h2", 8*gib)
	web := e.createVM(e.op, `{"name":"web","tenant":"acme","host":"h1"}`)
	var h controllerapi.Host
	e.must(200, "POST", "/v1/hosts/h1/drain", e.op, "", &h)
	if !h.Draining || h.Vms != 1 {
		t.Fatalf("drained host %+v", h)
	}
	e.must(200, "POST", "/v1/hosts/h1/drain", e.op, "", &h) // again: no change, no event
	// A registration (a sluiced restarting) keeps it draining.
	e.registerHost("h1", 8*gib)
	for _, placement := range []string{"spread", "pack"} {
		if vm := e.createVM(e.op, `{"name":"n-`+placement+`","tenant":"acme","placement":"`+placement+`"}`); vm.Host != "h2" {
			t.Fatalf("%s placed a VM on %s, a draining host", placement, vm.Host)
		}
	}
	if r := e.do("POST", "/v1/vms", e.op, `{"name":"pinned","tenant":"acme","host":"h1"}`); r.status != 409 || r.apiError(t).Code != "conflict" || r.field() != "host" {
		t.Fatalf("a VM pinned to a draining host: %d %s", r.status, r.body)
	}
	// Its VM stays where it is.
	var vm controllerapi.VM
	e.must(200, "GET", "/v1/vms/web", e.op, "", &vm)
	if vm.Host != "h1" || vm.Generation != web.Generation {
		t.Fatalf("web after the drain: %+v", vm)
	}
	// With h2 draining too, there is nowhere to go.
	e.must(200, "POST", "/v1/hosts/h2/drain", e.op, "", nil)
	if r := e.do("POST", "/v1/vms/web/move", e.op, `{}`); r.status != 409 || r.apiError(t).Code != "no_capacity" {
		t.Fatalf("moving off with every host draining: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/vms/n-spread/move", e.op, `{"host":"h1"}`); r.status != 409 || r.field() != "host" {
		t.Fatalf("moving onto a draining host: %d %s", r.status, r.body)
	}
	e.must(200, "POST", "/v1/hosts/h2/undrain", e.op, "", &h)
	if h.Draining {
		t.Fatalf("undrained host %+v", h)
	}

	// Deleting: refused while web is on h1, naming it.
	r := e.do("DELETE", "/v1/hosts/h1", e.op, "")
	if r.status != 409 || r.apiError(t).Code != "conflict" || r.field() != "name" || !strings.Contains(r.apiError(t).Message, "1 VM(s), web:") {
		t.Fatalf("deleting a host with a VM: %d %s", r.status, r.body)
	}
	e.must(200, "POST", "/v1/vms/web/move", e.op, `{}`, &vm)
	if vm.Host != "h2" {
		t.Fatalf("web moved to %s", vm.Host)
	}
	// Operators only: a tenant and a host token get 403.
	for _, tok := range []string{e.acme, e.h1} {
		for _, c := range [][2]string{{"DELETE", "/v1/hosts/h1"}, {"POST", "/v1/hosts/h1/drain"}, {"POST", "/v1/hosts/h1/undrain"}} {
			if r := e.do(c[0], c[1], tok, ""); r.status != 403 {
				t.Errorf("%s %s as a non-operator: %d %s", c[0], c[1], r.status, r.body)
			}
		}
	}
	e.must(204, "DELETE", "/v1/hosts/h1", e.op, "", nil)
	for _, c := range [][2]string{{"GET", "/v1/hosts/h1"}, {"DELETE", "/v1/hosts/h1"}, {"POST", "/v1/hosts/h1/drain"}, {"POST", "/v1/hosts/h1/undrain"}} {
		if r := e.do(c[0], c[1], e.op, ""); r.status != 404 || r.field() != "name" {
			t.Errorf("%s %s after the delete: %d %s, want 404 naming name", c[0], c[1], r.status, r.body)
		}
	}
	var gpus []controllerapi.GPU
	e.must(200, "GET", "/v1/gpus", e.op, "", &gpus)
	if len(gpus) != 1 || gpus[0].Host != "h2" {
		t.Fatalf("GPUs after the delete: %+v", gpus)
	}

	var evs []controllerapi.Event
	e.must(200, "GET", "/v1/events?limit=100", e.op, "", &evs)
	var got []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.Action, "host.") && ev.Action != "host.register" {
			got = append(got, ev.Action+" "+ev.Target+" by "+strings.Fields(ev.Actor)[0])
		}
	}
	want := "host.delete h1 by ops, host.undrain h2 by ops, host.drain h2 by ops, host.drain h1 by ops"
	if strings.Join(got, ", ") != want {
		t.Fatalf("host events: %s\nwant %s", strings.Join(got, ", "), want)
	}
}
