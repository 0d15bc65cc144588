package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

// FuzzDecodeJSON feeds arbitrary bodies to the request decoder for every
// request type: it must never panic, must refuse with a 400 invalid error,
// and what it accepts must encode and decode again to the same value.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"web","tenant":"acme","weight":2,"cap":0.5,"memory_bytes":1024,"placement":"pack"}`,
		`{"host":"h1","intervals":[{"vm":"web","seq":1,"start":"2026-11-01T12:00:00Z","end":"2026-11-01T12:01:00Z","gpu_ns":5}]}`,
		`{"address":"a","gpus":[{"index":0,"model":"m","memory_bytes":1}]}`,
		`{"name":"x","role":"tenant","tenant":"acme"}`,
		`{"weight":1e400}`, `{"bogus":1}`, `{`, `null`, `[]`, `{} x`, "\xff", `{"gpus":[{"index":-1}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		check := func(v any, fresh func() any) {
			err := decodeJSON(strings.NewReader(body), v)
			if err != nil {
				var ae *apiError
				if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.code != controllerapi.Invalid || ae.msg == "" {
					t.Fatalf("decoding %q into %T: %#v, want a 400 invalid error", body, v, err)
				}
				return
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("re-encoding %T decoded from %q: %v", v, body, err)
			}
			w := fresh()
			if err := decodeJSON(strings.NewReader(string(b)), w); err != nil {
				t.Fatalf("decoding our own encoding %s of %T: %v", b, v, err)
			}
			if b2, _ := json.Marshal(w); string(b2) != string(b) {
				t.Fatalf("round trip of %T: %s then %s", v, b, b2)
			}
		}
		check(new(controllerapi.CreateVMRequest), func() any { return new(controllerapi.CreateVMRequest) })
		check(new(controllerapi.UpdateVMRequest), func() any { return new(controllerapi.UpdateVMRequest) })
		check(new(controllerapi.MoveVMRequest), func() any { return new(controllerapi.MoveVMRequest) })
		check(new(controllerapi.CreateTokenRequest), func() any { return new(controllerapi.CreateTokenRequest) })
		check(new(controllerapi.RegisterHostRequest), func() any { return new(controllerapi.RegisterHostRequest) })
		check(new(controllerapi.IngestUsageRequest), func() any { return new(controllerapi.IngestUsageRequest) })
	})
}

func TestDecodeJSONNamesFields(t *testing.T) {
	for body, field := range map[string]string{
		`{"name":"x","bogus":true}`:     "bogus",
		`{"weight":"x"}`:                "weight",
		`{"weight":1.5}`:                "weight",
		`{"cap":true}`:                  "cap",
		`{"name":"x"} trailing`:         "",
		``:                              "",
		`{"name":`:                      "",
		`"just a string"`:               "",
		`{"placement":["spread"]}`:      "placement",
		`{"memory_bytes":1e30}`:         "memory_bytes",
		`{"name":"x","name":"y","a":1}`: "a",
	} {
		var req controllerapi.CreateVMRequest
		err := decodeJSON(strings.NewReader(body), &req)
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != 400 || ae.field != field {
			t.Errorf("decoding %q: %#v, want 400 naming %q", body, err, field)
		}
	}
}
