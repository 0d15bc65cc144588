package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if _, err := parseFlags([]string{"--version"}, &out, &errb); err != errHelp || out.String() != "sluice-proxy dev\n" {
		t.Errorf("--version: %v, %q", err, out.String())
	}
	out.Reset()
	if _, err := parseFlags([]string{"--help"}, &out, &errb); err != errHelp {
		t.Errorf("--help: %v", err)
	}
	for _, want := range []string{"--volume string", "--spin duration", "--context-spin duration", "SLUICE_PROXY_CPU_PROFILE_FOR"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	o, err := parseFlags([]string{"--volume", "/v", "--spin", "150us", "--heap-size", "4096"}, &out, &errb)
	if err != nil || o.spin != 150*time.Microsecond || o.addressSpace != 4096+8<<30 {
		t.Errorf("parsed %+v, %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--volume", "/v", "--spin", "150"}, `"--spin"`},
		{[]string{"--volume", "/v", "extra"}, "extra"},
		{[]string{"--spin", "1ms"}, "--volume is required"},
	} {
		if _, err := parseFlags(tc.args, &out, &errb); err == nil || err == errHelp || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
