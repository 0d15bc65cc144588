package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs sluicectl in-process with env as its environment.
func runCLI(ctx context.Context, env map[string]string, term bool, args ...string) result {
	var out, errb bytes.Buffer
	code := Run(ctx, args, Options{
		Version:    "v9.9.9",
		Stdout:     &out,
		Stderr:     &errb,
		Getenv:     func(k string) string { return env[k] },
		IsTerminal: func(io.Writer) bool { return term },
	})
	return result{out.String(), errb.String(), code}
}

const wantVMTable = `NAME   ID  WEIGHT  CAP  CHANNELS  STATE      PEERS  ENDPOINT
batch  12       1  25%         8  waiting        0  /run/sluice/vms/batch.sock
web     1       2    -         4  connected      1  /run/sluice/vms/web.sock
`

const wantVMGet = `Name:          web
ID:            1
Weight:        2
Cap:           none
State:         connected
Peers:         1
Endpoint:      /run/sluice/vms/web.sock
MSI vectors:   5
Channels:      4
Ring entries:  256
Region size:   4 MiB (4194304 bytes)
Heap size:     3 MiB (3145728 bytes)
Memory:        1.5 GiB used, quota 8 GiB
In flight:     2ms of a 3.25ms budget, a kernel or copy costed 100µs, 1 stall for room
Created:       2026-05-09T12:00:00Z
`

const wantUsage = `VM:        web
GPU time:  1.234567 s (1234567890 ns)
Kernels:   420
Commands:  1000
Errors:    3
Since:     2026-05-09T12:00:00Z
`

const wantUsageJSON = `{
  "name": "web",
  "gpu_ns": 1234567890,
  "kernels": 420,
  "commands": 1000,
  "errors": 3,
  "since": "2026-05-09T12:00:00Z"
}
`

const hint = "Run 'sluicectl vm create --help' for usage.\n"

const setHint = "Run 'sluicectl vm set --help' for usage.\n"

const policyHint = "Run 'sluicectl policy set --help' for usage.\n"

// wantVMSetWeb is "vm get web" after "vm set web --weight 5 --cap 12.5%".
var wantVMSetWeb = strings.Replace(strings.Replace(wantVMGet, "Weight:        2\n", "Weight:        5\n", 1),
	"Cap:           none\n", "Cap:           12.5% of the GPU (enforced under policy cap)\n", 1)

const wantPolicy = `Policy:      dfq (disengaged fair queuing by weight)
Accounting:  loga
`

type commandTest struct {
	name   string
	args   []string
	want   result
	check  func(t *testing.T, f *fakeDaemon) // state of the daemon afterwards
	prefix bool                              // want.stdout is a prefix only
}

// commandTests run against a fresh fake daemon each, with --socket.
var commandTests = []commandTest{
	{name: "version", args: []string{"version"}, want: result{stdout: "client: sluicectl v9.9.9\n" +
		"daemon: sluiced 0.3.0 (ABI 1.0, backend fake, clock virtual, epoch 7)\n"}},
	{name: "version flag", args: []string{"--version"}, want: result{stdout: "sluicectl v9.9.9\n"}},
	{name: "create prints endpoint", args: []string{"vm", "create", "db"},
		want: result{stdout: "/run/sluice/vms/db.sock\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			wantReqs(t, f, hostapi.CreateVMRequest{Name: "db"})
		}},
	{name: "create with flags", args: []string{"vm", "create", "big", "--weight", "4", "--channels", "8",
		"--ring-entries", "512", "--region-size", "64MiB"},
		want: result{stdout: "/run/sluice/vms/big.sock\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			wantReqs(t, f, hostapi.CreateVMRequest{Name: "big", Weight: 4, Channels: 8,
				RingEntries: 512, RegionSize: 64 << 20})
		}},
	{name: "create with memory", args: []string{"vm", "create", "m", "--memory", "8GiB"},
		want: result{stdout: "/run/sluice/vms/m.sock\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			wantReqs(t, f, hostapi.CreateVMRequest{Name: "m", Memory: 8 << 30})
		}},
	{name: "create with max command", args: []string{"vm", "create", "m", "--max-command", "250ms"},
		want: result{stdout: "/run/sluice/vms/m.sock\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			wantReqs(t, f, hostapi.CreateVMRequest{Name: "m", MaxCommandNs: 250e6})
		}},
	{name: "create bad max command", args: []string{"vm", "create", "x", "--max-command", "-1s"},
		want: result{stderr: "sluicectl: invalid argument \"-1s\" for \"--max-command\" flag: " +
			"want a positive duration, e.g. 250ms, or default\n" + hint, code: 2}},
	{name: "create zero memory", args: []string{"vm", "create", "x", "--memory", "0"},
		want: result{stderr: "sluicectl: invalid argument \"0\" for \"--memory\" flag: " +
			"size must be greater than zero\n" + hint, code: 2}},
	{name: "create region size in bytes", args: []string{"vm", "create", "b", "--region-size=65536"},
		want: result{stdout: "/run/sluice/vms/b.sock\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			wantReqs(t, f, hostapi.CreateVMRequest{Name: "b", RegionSize: 65536})
		}},
	{name: "create json", args: []string{"vm", "create", "db", "--json"},
		want: result{stdout: "{\n  \"name\": \"db\",\n  \"id\": 101,\n"}, prefix: true},
	{name: "create exists", args: []string{"vm", "create", "web"},
		want: result{stderr: "sluicectl: vm \"web\": already exists\n", code: 1}},
	{name: "create rejected by daemon", args: []string{"vm", "create", "x", "--region-size", "3000"},
		want: result{stderr: "sluicectl: vm \"x\": region size 3000 is not a power of two: invalid request\n", code: 1}},
	{name: "create rejected, daemon names the vm", args: []string{"vm", "create", "named"},
		want: result{stderr: "sluicectl: vm \"named\": name reserved: invalid request\n", code: 1}},
	{name: "create bad size unit", args: []string{"vm", "create", "x", "--region-size", "4MB"},
		want: result{stderr: "sluicectl: invalid argument \"4MB\" for \"--region-size\" flag: invalid size \"4MB\": " +
			"want bytes or a KiB, MiB, GiB or TiB suffix, e.g. 4MiB\n" + hint, code: 2},
		check: func(t *testing.T, f *fakeDaemon) { wantReqs(t, f) }},
	{name: "create size overflow", args: []string{"vm", "create", "x", "--region-size", "20000000TiB"},
		want: result{stderr: "sluicectl: invalid argument \"20000000TiB\" for \"--region-size\" flag: " +
			"invalid size \"20000000TiB\": too large\n" + hint, code: 2}},
	{name: "create zero size", args: []string{"vm", "create", "x", "--region-size", "0"},
		want: result{stderr: "sluicectl: invalid argument \"0\" for \"--region-size\" flag: " +
			"size must be greater than zero\n" + hint, code: 2}},
	{name: "create with cap", args: []string{"vm", "create", "c", "--cap", "25%"},
		want: result{stdout: "/run/sluice/vms/c.sock\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			wantReqs(t, f, hostapi.CreateVMRequest{Name: "c", Cap: 0.25})
		}},
	{name: "create cap too large", args: []string{"vm", "create", "c", "--cap", "1.5"},
		want: result{stderr: "sluicectl: invalid argument \"1.5\" for \"--cap\" flag: invalid share \"1.5\": " +
			"more than the whole GPU: want a fraction from 0 to 1 or a percentage, e.g. 0.25 or 25%\n" + hint, code: 2},
		check: func(t *testing.T, f *fakeDaemon) { wantReqs(t, f) }},
	{name: "create zero weight", args: []string{"vm", "create", "x", "--weight", "0"},
		want:  result{stderr: "sluicectl: --weight must be at least 1\n" + hint, code: 2},
		check: func(t *testing.T, f *fakeDaemon) { wantReqs(t, f) }},
	{name: "create negative weight", args: []string{"vm", "create", "x", "--weight", "-1"},
		want: result{stderr: "sluicectl: invalid argument \"-1\" for \"--weight\" flag: " +
			"strconv.ParseUint: parsing \"-1\": invalid syntax\n" + hint, code: 2}},
	{name: "create zero channels", args: []string{"vm", "create", "x", "--channels", "0"},
		want: result{stderr: "sluicectl: --channels must be at least 1\n" + hint, code: 2}},
	{name: "create negative ring entries", args: []string{"vm", "create", "x", "--ring-entries=-4"},
		want: result{stderr: "sluicectl: --ring-entries must be at least 1\n" + hint, code: 2}},
	{name: "create no name", args: []string{"vm", "create"},
		want: result{stderr: "sluicectl: missing argument NAME\n" + hint, code: 2}},
	{name: "create empty name", args: []string{"vm", "create", ""},
		want: result{stderr: "sluicectl: argument NAME must not be empty\n" + hint, code: 2}},
	{name: "create two names", args: []string{"vm", "create", "a", "b"},
		want: result{stderr: "sluicectl: unexpected argument \"b\"\n" + hint, code: 2}},
	{name: "list", args: []string{"vm", "list"}, want: result{stdout: wantVMTable}},
	{name: "list alias", args: []string{"vm", "ls"}, want: result{stdout: wantVMTable}},
	{name: "get", args: []string{"vm", "get", "web"}, want: result{stdout: wantVMGet}},
	{name: "get not found", args: []string{"vm", "get", "nope"},
		want: result{stderr: "sluicectl: vm \"nope\": not found\n", code: 1}},
	{name: "get json", args: []string{"vm", "get", "web", "--json"},
		want: result{stdout: "{\n  \"name\": \"web\",\n  \"id\": 1,\n  \"weight\": 2,\n  \"cap\": 0,\n"}, prefix: true},
	{name: "set weight and cap", args: []string{"vm", "set", "web", "--weight", "5", "--cap", "12.5%"},
		want:  result{stdout: wantVMSetWeb},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "web weight=5 cap=0.125") }},
	{name: "set weight only", args: []string{"vm", "set", "batch", "--weight=3"},
		want: result{stdout: "Name:          batch\nID:            12\nWeight:        3\n" +
			"Cap:           25% of the GPU (enforced under policy cap)\n"}, prefix: true,
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "batch weight=3 cap=-") }},
	{name: "set cap 0 clears", args: []string{"vm", "set", "batch", "--cap", "0"},
		want: result{stdout: "Name:          batch\nID:            12\nWeight:        1\nCap:           none\n"}, prefix: true,
		check: func(t *testing.T, f *fakeDaemon) {
			wantUpdates(t, f, "batch weight=- cap=0")
			if f.vms["batch"].Cap != 0 {
				t.Errorf("batch cap %v, want cleared", f.vms["batch"].Cap)
			}
		}},
	{name: "set json", args: []string{"vm", "set", "web", "--cap", "0.5", "--json"},
		want: result{stdout: "{\n  \"name\": \"web\",\n  \"id\": 1,\n  \"weight\": 2,\n  \"cap\": 0.5,\n"}, prefix: true},
	{name: "set memory", args: []string{"vm", "set", "web", "--memory", "512MiB"},
		want: result{stdout: strings.Replace(wantVMGet, "quota 8 GiB\n",
			"quota 512 MiB (over it: what takes more memory fails until the VM frees enough)\n", 1)},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "web weight=- cap=- memory=536870912") }},
	{name: "set memory none", args: []string{"vm", "set", "web", "--memory", "none"},
		want:  result{stdout: strings.Replace(wantVMGet, "used, quota 8 GiB\n", "used, no quota\n", 1)},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "web weight=- cap=- memory=0") }},
	{name: "set bad memory", args: []string{"vm", "set", "web", "--memory", "lots"},
		want: result{stderr: "sluicectl: invalid argument \"lots\" for \"--memory\" flag: invalid size \"lots\": " +
			"want bytes or a KiB, MiB, GiB or TiB suffix, e.g. 4MiB\n" + setHint, code: 2}},
	{name: "set max command", args: []string{"vm", "set", "web", "--max-command", "2s"},
		want:  result{stdout: strings.Replace(wantVMGet, "Created:", "Max command:   2s\nCreated:", 1)},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "web weight=- cap=- max_command_ns=2000000000") }},
	{name: "set max command default", args: []string{"vm", "set", "web", "--max-command", "default"},
		want:  result{stdout: strings.Replace(wantVMGet, "Created:", "Max command:   500ms\nCreated:", 1)},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "web weight=- cap=- max_command_ns=0") }},
	{name: "set nothing", args: []string{"vm", "set", "web"},
		want:  result{stderr: "sluicectl: nothing to change: give --weight, --cap, --syscall-window, --syscall-batch, --memory, --max-command or --owner\n" + setHint, code: 2},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f) }},
	{name: "set zero weight", args: []string{"vm", "set", "web", "--weight", "0"},
		want:  result{stderr: "sluicectl: --weight must be at least 1\n" + setHint, code: 2},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f) }},
	{name: "set bad cap", args: []string{"vm", "set", "web", "--cap", "-1"},
		want: result{stderr: "sluicectl: invalid argument \"-1\" for \"--cap\" flag: invalid share \"-1\": " +
			"want a fraction from 0 to 1 or a percentage, e.g. 0.25 or 25%\n" + setHint, code: 2}},
	{name: "set no name", args: []string{"vm", "set", "--weight", "2"},
		want: result{stderr: "sluicectl: missing argument NAME\n" + setHint, code: 2}},
	{name: "set rejected by daemon", args: []string{"vm", "set", "web", "--weight", "2000000"},
		want: result{stderr: "sluicectl: vm \"web\": weight 2000000: want 1 to 1000000: invalid request\n", code: 1}},
	{name: "create rejected by daemon", args: []string{"vm", "create", "web2", "--weight", "2000000"},
		want: result{stderr: "sluicectl: vm \"web2\": weight 2000000: want 1 to 1000000: invalid request\n", code: 1}},
	{name: "set not found", args: []string{"vm", "set", "nope", "--cap", "1"},
		want:  result{stderr: "sluicectl: vm \"nope\": not found\n", code: 1},
		check: func(t *testing.T, f *fakeDaemon) { wantUpdates(t, f, "nope weight=- cap=1") }},
	{name: "policy get", args: []string{"policy", "get"}, want: result{stdout: wantPolicy}},
	{name: "policy get json", args: []string{"policy", "get", "--json"},
		want: result{stdout: "{\n  \"policy\": \"dfq\",\n  \"accounting\": \"loga\"\n}\n"}},
	{name: "policy set", args: []string{"policy", "set", "cap"},
		want: result{stdout: "Policy:      cap (hard maximum shares; may idle the GPU)\nAccounting:  loga\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			if want := []hostapi.PolicyState{{Policy: "cap"}}; !reflect.DeepEqual(f.setTo, want) {
				t.Errorf("set requests %+v, want %+v", f.setTo, want)
			}
		}},
	{name: "policy set json", args: []string{"policy", "set", "none", "--json"},
		want: result{stdout: "{\n  \"policy\": \"none\",\n  \"accounting\": \"loga\"\n}\n"}},
	{name: "policy set unknown", args: []string{"policy", "set", "fair"},
		want: result{stderr: "sluicectl: unknown policy \"fair\" (want one of: none, dfq, cap, timeslice)\n" + policyHint, code: 2},
		check: func(t *testing.T, f *fakeDaemon) {
			if len(f.setTo) != 0 {
				t.Errorf("set requests %+v, want none", f.setTo)
			}
		}},
	{name: "policy set missing", args: []string{"policy", "set"},
		want: result{stderr: "sluicectl: missing argument POLICY\n" + policyHint, code: 2}},
	{name: "policy set two", args: []string{"policy", "set", "dfq", "cap"},
		want: result{stderr: "sluicectl: unexpected argument \"cap\"\n" + policyHint, code: 2}},
	{name: "policy no command", args: []string{"policy"},
		want: result{stderr: "sluicectl: missing command after \"sluicectl policy\" (one of: get, set)\n" +
			"Run 'sluicectl policy --help' for usage.\n", code: 2}},
	{name: "policy set help", args: []string{"policy", "set", "--help"}, prefix: true,
		want: result{stdout: "Switch the GPU's scheduling policy to one of none, dfq, cap, timeslice\n"}},
	{name: "delete", args: []string{"vm", "delete", "web"}, want: result{stdout: "vm \"web\" deleted\n"},
		check: func(t *testing.T, f *fakeDaemon) {
			if _, ok := f.vms["web"]; ok {
				t.Error("vm web still exists")
			}
		}},
	{name: "delete not found", args: []string{"vm", "rm", "nope"},
		want: result{stderr: "sluicectl: vm \"nope\": not found\n", code: 1}},
	{name: "usage", args: []string{"vm", "usage", "web"}, want: result{stdout: wantUsage}},
	{name: "usage json", args: []string{"vm", "usage", "web", "--json"}, want: result{stdout: wantUsageJSON}},
	{name: "usage not found", args: []string{"vm", "usage", "nope", "--json"},
		want: result{stderr: "sluicectl: vm \"nope\": not found\n", code: 1}},
	{name: "usage daemon unavailable", args: []string{"vm", "usage", "flaky"},
		want: result{stderr: "sluicectl: vm \"flaky\": accounting store busy: unavailable\n", code: 1}},
	{name: "help", args: []string{"vm", "create", "--help"}, prefix: true,
		want: result{stdout: "Create a VM endpoint named NAME"}},
	{name: "no command", args: []string{},
		want: result{stderr: "sluicectl: missing command after \"sluicectl\" (one of: bench, events, gpu, host, libvirt, policy, token, top, usage, version, vm, whoami)\n" +
			"Run 'sluicectl --help' for usage.\n", code: 2}},
	{name: "vm no command", args: []string{"vm"},
		want: result{stderr: "sluicectl: missing command after \"sluicectl vm\" " +
			"(one of: create, delete, exec, get, list, move, set, start, stop, usage, xml)\nRun 'sluicectl vm --help' for usage.\n", code: 2}},
	{name: "unknown command", args: []string{"vm", "lst"},
		want: result{stderr: "sluicectl: unknown command \"lst\" for \"sluicectl vm\" " +
			"(did you mean \"list\" or \"get\" or \"set\"?)\nRun 'sluicectl vm --help' for usage.\n", code: 2}},
	{name: "unknown top-level command", args: []string{"frobnicate"},
		want: result{stderr: "sluicectl: unknown command \"frobnicate\" for \"sluicectl\"\n" +
			"Run 'sluicectl --help' for usage.\n", code: 2}},
	{name: "unknown flag", args: []string{"vm", "list", "--wide"},
		want: result{stderr: "sluicectl: unknown flag: --wide\nRun 'sluicectl vm list --help' for usage.\n", code: 2}},
	{name: "extra argument", args: []string{"vm", "list", "web"},
		want: result{stderr: "sluicectl: unexpected argument \"web\"\nRun 'sluicectl vm list --help' for usage.\n", code: 2}},
}

func TestCommands(t *testing.T) {
	for _, tt := range commandTests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDaemon()
			socket := f.serve(t)
			got := runCLI(t.Context(), nil, false, append([]string{"--socket", socket}, tt.args...)...)
			if tt.prefix {
				if !strings.HasPrefix(got.stdout, tt.want.stdout) {
					t.Errorf("stdout = %q, want prefix %q", got.stdout, tt.want.stdout)
				}
				got.stdout = tt.want.stdout
			}
			if got != tt.want {
				t.Errorf("got\n%+v\nwant\n%+v", got, tt.want)
			}
			if tt.check != nil {
				f.mu.Lock()
				defer f.mu.Unlock()
				tt.check(t, f)
			}
		})
	}
}

func wantReqs(t *testing.T, f *fakeDaemon, want ...hostapi.CreateVMRequest) {
	t.Helper()
	if len(f.created) != len(want) || (len(want) > 0 && !reflect.DeepEqual(f.created, want)) {
		t.Errorf("create requests = %+v, want %+v", f.created, want)
	}
}

func wantUpdates(t *testing.T, f *fakeDaemon, want ...string) {
	t.Helper()
	if !slices.Equal(f.updates, want) {
		t.Errorf("update requests = %q, want %q", f.updates, want)
	}
}

// TestPolicySetDaemonError checks that a refusal by the daemon is an error
// (exit 1), not a usage error, and names what was tried.
func TestPolicySetDaemonError(t *testing.T) {
	f := newFakeDaemon()
	f.policy.Accounting = "off"
	socket := f.serve(t)
	r := runCLI(t.Context(), nil, false, "--socket", socket, "policy", "set", "timeslice")
	want := result{stderr: "sluicectl: setting policy timeslice: policy \"timeslice\" needs accounting: invalid request\n", code: 1}
	if r != want {
		t.Errorf("got %+v, want %+v", r, want)
	}
}

// TestPolicyCompletion checks the shell completion of "policy set": the four
// policies, described, and no file names.
func TestPolicyCompletion(t *testing.T) {
	r := runCLI(t.Context(), nil, false, "__complete", "policy", "set", "")
	want := "none\taccounting only, no scheduling\n" +
		"dfq\tdisengaged fair queuing by weight\n" +
		"cap\thard maximum shares; may idle the GPU\n" +
		"timeslice\tengaged round robin, a baseline\n" +
		":4\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("got %+v, want stdout %q", r, want)
	}
	r = runCLI(t.Context(), nil, false, "__complete", "policy", "set", "dfq", "")
	if r.code != 0 || r.stdout != ":4\n" {
		t.Errorf("second argument: got %+v, want no candidates", r)
	}
}

func TestJSONRoundTrips(t *testing.T) {
	f := newFakeDaemon()
	socket := f.serve(t)
	t.Run("list", func(t *testing.T) {
		r := runCLI(t.Context(), nil, false, "--socket", socket, "vm", "list", "--json")
		var got []hostapi.VM
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
			t.Fatalf("code %d, %v: %q", r.code, err, r.stdout)
		}
		want := []hostapi.VM{vmBatch, vmWeb}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("create", func(t *testing.T) {
		r := runCLI(t.Context(), nil, false, "--socket", socket, "vm", "create", "db", "--json")
		var got hostapi.VM
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
			t.Fatalf("code %d, %v: %q", r.code, err, r.stdout)
		}
		if got.Name != "db" || got.Endpoint != "/run/sluice/vms/db.sock" || got.Vectors != 5 {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("empty list", func(t *testing.T) {
		f.mu.Lock()
		clear(f.vms)
		f.mu.Unlock()
		r := runCLI(t.Context(), nil, false, "--socket", socket, "vm", "list", "--json")
		if r != (result{stdout: "[]\n"}) {
			t.Errorf("got %+v", r)
		}
		r = runCLI(t.Context(), nil, false, "--socket", socket, "vm", "list")
		if r != (result{stdout: "NAME  ID  WEIGHT  CAP  CHANNELS  STATE  PEERS  ENDPOINT\n"}) {
			t.Errorf("got %+v", r)
		}
	})
}

func TestSocketSelection(t *testing.T) {
	socket := newFakeDaemon().serve(t)
	missing := filepath.Join(t.TempDir(), "missing.sock")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"env", map[string]string{SocketEnv: socket}, nil, 0},
		{"flag beats env", map[string]string{SocketEnv: missing}, []string{"--socket", socket}, 0},
		{"env wrong", map[string]string{SocketEnv: missing}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t.Context(), tt.env, false, append(tt.args, "vm", "get", "web")...)
			if r.code != tt.code {
				t.Errorf("code = %d, want %d (stderr %q)", r.code, tt.code, r.stderr)
			}
		})
	}
	t.Run("default in help", func(t *testing.T) {
		r := runCLI(t.Context(), nil, false, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, `(default "`+DefaultSocket+`")`) {
			t.Errorf("got %+v", r)
		}
		r = runCLI(t.Context(), map[string]string{SocketEnv: "/x/y.sock"}, false, "--help")
		if !strings.Contains(r.stdout, `(default "/x/y.sock")`) {
			t.Errorf("env default not shown: %q", r.stdout)
		}
	})
}

func TestDaemonDown(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sock")
	// A socket file nobody listens on: connection refused.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	cmds := [][]string{
		{"vm", "list"}, {"vm", "create", "x"}, {"vm", "get", "x"}, {"vm", "delete", "x"},
		{"vm", "usage", "x", "--json"}, {"top", "--once"}, {"vm", "set", "x", "--weight", "2"},
		{"policy", "get"}, {"policy", "set", "dfq", "--json"},
	}
	for _, socket := range []string{missing, stale} {
		want := "sluicectl: cannot reach sluiced at " + socket +
			": is it running? (set --socket or SLUICE_SOCKET)\n"
		for _, args := range cmds {
			t.Run(filepath.Base(socket)+" "+strings.Join(args, " "), func(t *testing.T) {
				r := runCLI(t.Context(), nil, false, append([]string{"--socket", socket}, args...)...)
				if r != (result{stderr: want, code: 1}) {
					t.Errorf("got %+v", r)
				}
			})
		}
	}
	t.Run("version", func(t *testing.T) {
		r := runCLI(t.Context(), map[string]string{SocketEnv: missing}, false, "version")
		want := result{stdout: "client: sluicectl v9.9.9\n", code: 1,
			stderr: "sluicectl: cannot reach sluiced at " + missing + ": is it running? (set --socket or SLUICE_SOCKET)\n"}
		if r != want {
			t.Errorf("got %+v, want %+v", r, want)
		}
	})
}

func TestDefaultVersion(t *testing.T) {
	var out bytes.Buffer
	missing := filepath.Join(t.TempDir(), "missing.sock")
	code := Run(t.Context(), []string{"--socket", missing, "version"}, Options{Stdout: &out})
	if code != 1 || out.String() != "client: sluicectl "+Version+"\n" {
		t.Errorf("code %d, stdout %q", code, out.String())
	}
}
