package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/vmm-plugin/libvirt"
)

// fakeAPI is an in-memory sluiced that records the calls it gets.
type fakeAPI struct {
	mu        sync.Mutex
	vms       map[string]hostapi.VM
	calls     []string
	createErr error // returned by CreateVM when set
	deleteErr error // returned by DeleteVM when set
	vectors   int   // of created VMs; default 5
}

var _ API = (*fakeAPI)(nil)

func newFakeAPI(vms ...hostapi.VM) *fakeAPI {
	f := &fakeAPI{vms: map[string]hostapi.VM{}}
	for _, vm := range vms {
		f.vms[vm.Name] = vm
	}
	return f
}

func (f *fakeAPI) CreateVM(_ context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := fmt.Sprintf("create %s weight=%d cap=%g channels=%d ring=%d region=%d",
		req.Name, req.Weight, req.Cap, req.Channels, req.RingEntries, req.RegionSize)
	if req.Volume != "" {
		call += " volume=" + req.Volume
	}
	f.calls = append(f.calls, call)
	if f.createErr != nil {
		return hostapi.VM{}, f.createErr
	}
	if _, ok := f.vms[req.Name]; ok {
		return hostapi.VM{}, &hostapi.RemoteError{Status: 409, Code: hostapi.CodeExists, Message: "exists"}
	}
	vectors := f.vectors
	if vectors == 0 {
		vectors = 5
	}
	vm := hostapi.VM{Name: req.Name, Endpoint: "/run/sluice/vms/" + req.Name + ".sock", Vectors: vectors, Volume: req.Volume}
	if vm.Volume == "" {
		vm.Volume = "/var/lib/sluice/volumes/" + req.Name
	}
	f.vms[req.Name] = vm
	return vm, nil
}

func (f *fakeAPI) GetVM(_ context.Context, name string) (hostapi.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "get "+name)
	if vm, ok := f.vms[name]; ok {
		return vm, nil
	}
	return hostapi.VM{}, &hostapi.RemoteError{Status: 404, Code: hostapi.CodeNotFound, Message: "not found"}
}

func (f *fakeAPI) DeleteVM(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "delete "+name)
	if f.deleteErr != nil {
		return f.deleteErr
	}
	if _, ok := f.vms[name]; !ok {
		return &hostapi.RemoteError{Status: 404, Code: hostapi.CodeNotFound, Message: "not found"}
	}
	delete(f.vms, name)
	return nil
}

// domainXML is a Sluice domain named web whose device points at path.
func domainXML(t *testing.T, name, path string, vectors uint, set libvirt.Settings) string {
	t.Helper()
	return volumeDomainXML(t, name, path, vectors, set, "")
}

// volumeDomainXML is domainXML with the VM's volume shared over 9p.
func volumeDomainXML(t *testing.T, name, path string, vectors uint, set libvirt.Settings, volume string) string {
	t.Helper()
	d := libvirt.ExampleDomain(libvirt.DomainOptions{
		Name: name, Kernel: "/boot/vmlinux",
		VM: libvirt.VMInfo{Endpoint: path, Vectors: vectors, Settings: set, Volume: volume},
	})
	b, err := libvirt.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const plainDomain = `<domain type='kvm'><name>web</name><memory>1024</memory>
<devices><shmem name='other'><model type='ivshmem-plain'/></shmem></devices></domain>`

type hookResult struct {
	code           int
	stdout, stderr string
}

func runHook(api API, stdin string, args ...string) hookResult {
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(stdin), &out, &errb, api)
	return hookResult{code, out.String(), errb.String()}
}

// noVolumeAccess stands in for granting QEMU access to a volume, which
// TestGrantVolume tests on a real directory.
func noVolumeAccess(t *testing.T) {
	t.Helper()
	saved := volumeAccess
	volumeAccess = func(string, uint32) error { return nil }
	t.Cleanup(func() { volumeAccess = saved })
}

func TestHook(t *testing.T) {
	noVolumeAccess(t)
	web := hostapi.VM{Name: "web", Endpoint: "/run/sluice/vms/web.sock", Vectors: 5}
	set := libvirt.Settings{Weight: 2, Cap: 0.5, Channels: 4, RingEntries: 128, RegionSize: 8 << 20}
	good := domainXML(t, "web", "/run/sluice/vms/web.sock", 5, set)
	for _, tc := range []struct {
		name      string
		existing  []hostapi.VM
		createErr error
		deleteErr error
		stdin     string
		args      []string
		code      int
		calls     []string
		stderr    string // a substring; "" for none at all
		left      []string
	}{
		{name: "prepare creates the vm", stdin: good, args: []string{"web", "prepare", "begin", "-"},
			calls: []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608"}, left: []string{"web"}},
		{name: "prepare without metadata takes defaults",
			stdin: domainXML(t, "web", "/run/sluice/vms/web.sock", 5, libvirt.Settings{}),
			args:  []string{"web", "prepare", "begin", "-"},
			calls: []string{"create web weight=0 cap=0 channels=0 ring=0 region=0"}, left: []string{"web"}},
		{name: "prepare accepts an existing vm", existing: []hostapi.VM{web}, stdin: good,
			args:  []string{"web", "prepare", "begin", "-"},
			calls: []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608", "get web"}, left: []string{"web"}},
		{name: "prepare with a wrong path deletes the vm it created",
			stdin: domainXML(t, "web", "/tmp/old/web.sock", 5, set),
			args:  []string{"web", "prepare", "begin", "-"}, code: ExitError,
			calls:  []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608", "delete web"},
			stderr: `sluice-libvirt-hook: prepare begin: domain "web": device <shmem name="sluice"> has <server path="/tmp/old/web.sock">, but the vm's endpoint is "/run/sluice/vms/web.sock": regenerate it with 'sluicectl libvirt xml web'`},
		{name: "prepare with too few vectors keeps an existing vm",
			existing: []hostapi.VM{{Name: "web", Endpoint: "/run/sluice/vms/web.sock", Vectors: 9}},
			stdin:    good, args: []string{"web", "prepare", "begin", "-"}, code: ExitError,
			calls:  []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608", "get web"},
			stderr: "<msi vectors='5'>, but the vm needs 9", left: []string{"web"}},
		{name: "prepare creates the vm with the domain's volume",
			stdin: volumeDomainXML(t, "web", "/run/sluice/vms/web.sock", 5, set, "/srv/vol/web"),
			args:  []string{"web", "prepare", "begin", "-"},
			calls: []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608 volume=/srv/vol/web"}, left: []string{"web"}},
		{name: "prepare with another volume than the vm's keeps an existing vm",
			existing: []hostapi.VM{{Name: "web", Endpoint: "/run/sluice/vms/web.sock", Vectors: 5, Volume: "/srv/other"}},
			stdin:    volumeDomainXML(t, "web", "/run/sluice/vms/web.sock", 5, set, "/srv/vol/web"),
			args:     []string{"web", "prepare", "begin", "-"}, code: ExitError,
			calls:  []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608 volume=/srv/vol/web", "get web"},
			stderr: `<filesystem> shares "/srv/vol/web" as sluice-volume, but the vm's volume is "/srv/other"`, left: []string{"web"}},
		{name: "prepare with bad metadata",
			stdin: strings.Replace(good, `weight="2"`, `weight="heavy"`, 1),
			args:  []string{"web", "prepare", "begin", "-"}, code: ExitError,
			stderr: `domain "web": metadata sluice:vm: weight "heavy"`},
		{name: "prepare when sluiced refuses", createErr: fmt.Errorf("vm name: %w", hostapi.ErrInvalid),
			stdin: good, args: []string{"web", "prepare", "begin", "-"}, code: ExitError,
			calls:  []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608"},
			stderr: `creating vm "web" in sluiced: vm name: invalid request`},
		{name: "prepare when sluiced is down",
			createErr: fmt.Errorf("POST /v1/vms on /x.sock: %w: %w", hostapi.ErrUnavailable,
				&net.OpError{Op: "dial", Net: "unix", Err: errors.New("connect: no such file or directory")}),
			stdin: good, args: []string{"web", "prepare", "begin", "-"}, code: ExitError,
			calls:  []string{"create web weight=2 cap=0.5 channels=4 ring=128 region=8388608"},
			stderr: `sluice-libvirt-hook: prepare begin: domain "web": cannot reach sluiced at /run/sluice/sluiced.sock (connect: no such file or directory): is it running?`},
		{name: "prepare of a domain named differently", stdin: good, args: []string{"db", "prepare", "begin", "-"},
			code: ExitError, stderr: `libvirt named domain "db" but its xml names "web"`},
		{name: "prepare ignores other domains", stdin: plainDomain, args: []string{"web", "prepare", "begin", "-"}},
		{name: "prepare ignores unreadable other domains", stdin: "<domain><memory>x</memory>",
			args: []string{"web", "prepare", "begin", "-"}},
		{name: "prepare fails on an unreadable sluice domain", stdin: good[:strings.Index(good, "<server")],
			args: []string{"web", "prepare", "begin", "-"}, code: ExitError, stderr: `domain "web": parsing domain xml: `},
		{name: "prepare of an empty input", args: []string{"web", "prepare", "begin", "-"}},
		{name: "release deletes", existing: []hostapi.VM{web}, stdin: good, args: []string{"web", "release", "end", "-"},
			calls: []string{"get web", "delete web"}},
		{name: "release of a deleted vm", stdin: good, args: []string{"web", "release", "end", "-"},
			calls: []string{"get web"}},
		{name: "release keeps a vm the device does not point at", existing: []hostapi.VM{web},
			stdin: domainXML(t, "web", "/tmp/old/web.sock", 5, set), args: []string{"web", "release", "end", "-"},
			calls: []string{"get web"}, left: []string{"web"}},
		{name: "release failing", existing: []hostapi.VM{web}, deleteErr: errors.New("disk full"),
			stdin: good, args: []string{"web", "release", "end", "-"}, code: ExitError,
			calls: []string{"get web", "delete web"}, stderr: `deleting vm "web" in sluiced: disk full`, left: []string{"web"}},
		{name: "release ignores other domains", existing: []hostapi.VM{web}, stdin: plainDomain,
			args: []string{"web", "release", "end", "-"}, left: []string{"web"}},
		{name: "other operations do nothing", existing: []hostapi.VM{web}, stdin: good,
			args: []string{"web", "started", "begin", "-"}, left: []string{"web"}},
		{name: "migrate prints nothing", existing: []hostapi.VM{web}, stdin: good,
			args: []string{"web", "migrate", "begin", "-"}, left: []string{"web"}},
		{name: "unknown operation with garbage", stdin: "\x00garbage", args: []string{"web", "frobnicate", "end", "-"}},
		{name: "stopped is not release", existing: []hostapi.VM{web}, stdin: good,
			args: []string{"web", "stopped", "end", "-"}, left: []string{"web"}},
		{name: "too few arguments", args: []string{"web", "prepare"}, code: ExitUsage, stderr: "want DOMAIN OPERATION SUBOP"},
		{name: "bad flag", args: []string{"--bogus", "web", "prepare", "begin", "-"}, code: ExitUsage,
			stderr: "unknown flag: --bogus"},
		{name: "bad timeout", args: []string{"--timeout", "0s", "web", "prepare", "begin", "-"}, code: ExitUsage,
			stderr: "--timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(tc.existing...)
			api.createErr, api.deleteErr = tc.createErr, tc.deleteErr
			r := runHook(api, tc.stdin, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit code %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("wrote to stdout: %q", r.stdout)
			}
			switch {
			case tc.stderr == "" && r.stderr != "":
				t.Errorf("stderr %q, want none", r.stderr)
			case !strings.Contains(r.stderr, tc.stderr):
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.stderr)
			}
			if tc.code == ExitError && strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", r.stderr)
			}
			if !slices.Equal(api.calls, tc.calls) {
				t.Errorf("calls %q, want %q", api.calls, tc.calls)
			}
			var left []string
			for name := range api.vms {
				left = append(left, name)
			}
			if !slices.Equal(left, tc.left) {
				t.Errorf("vms left %q, want %q", left, tc.left)
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	r := runHook(nil, "", "--help")
	if r.code != ExitOK || !strings.Contains(r.stdout, "install-libvirt-hook.sh") || !strings.Contains(r.stdout, "--socket string") ||
		!strings.Contains(r.stdout, "--timeout duration") {
		t.Errorf("--help: %+v", r)
	}
	Version = "v1.2.3"
	t.Cleanup(func() { Version = "dev" })
	r = runHook(nil, "", "--version")
	if r.code != ExitOK || r.stdout != "sluice-libvirt-hook v1.2.3\n" {
		t.Errorf("--version: %+v", r)
	}
}

// slowAPI blocks until the context ends.
type slowAPI struct{ fakeAPI }

func (s *slowAPI) CreateVM(ctx context.Context, _ hostapi.CreateVMRequest) (hostapi.VM, error) {
	<-ctx.Done()
	return hostapi.VM{}, ctx.Err()
}

func TestTimeout(t *testing.T) {
	good := domainXML(t, "web", "/run/sluice/vms/web.sock", 5, libvirt.Settings{})
	start := time.Now()
	r := runHook(&slowAPI{}, good, "--timeout", "50ms", "web", "prepare", "begin", "-")
	if r.code != ExitError || !strings.Contains(r.stderr, "see --timeout") {
		t.Errorf("got %+v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestRealClient runs prepare and release through hostapi.Client against an
// HTTP server on a UNIX socket, as the installed hook talks to sluiced.
func TestRealClient(t *testing.T) {
	dir, err := os.MkdirTemp("", "slhook")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/vms", func(w http.ResponseWriter, r *http.Request) {
		var req hostapi.CreateVMRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("POST %s weight=%d", req.Name, req.Weight))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(hostapi.VM{Name: req.Name, Endpoint: filepath.Join(dir, "vms", req.Name+".sock"), Vectors: 5})
	})
	mux.HandleFunc("GET /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, "GET "+r.PathValue("name"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(hostapi.VM{Name: r.PathValue("name"), Endpoint: filepath.Join(dir, "vms", r.PathValue("name")+".sock"), Vectors: 5})
	})
	mux.HandleFunc("DELETE /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, "DELETE "+r.PathValue("name"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(hostapi.Error{Code: hostapi.CodeNotFound, Message: "no vm"})
	})
	srv := &http.Server{Handler: mux}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	xml := domainXML(t, "web", filepath.Join(dir, "vms", "web.sock"), 5, libvirt.Settings{Weight: 3})
	for _, op := range [][]string{{"prepare", "begin"}, {"release", "end"}} {
		var errb bytes.Buffer
		args := []string{"--socket", socket, "web", op[0], op[1], "-"}
		if code := Run(context.Background(), args, strings.NewReader(xml), io.Discard, &errb, nil); code != ExitOK {
			t.Errorf("%s: exit %d: %s", op[0], code, errb.String())
		}
	}
	// sluiced gone: prepare fails with a message naming the socket.
	_ = srv.Close()
	var errb bytes.Buffer
	args := []string{"--socket", socket, "web", "prepare", "begin", "-"}
	if code := Run(context.Background(), args, strings.NewReader(xml), io.Discard, &errb, nil); code != ExitError ||
		!strings.Contains(errb.String(), "cannot reach sluiced at "+socket) {
		t.Errorf("with sluiced gone: exit %d: %s", code, errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"POST web weight=3", "GET web", "DELETE web"}; !slices.Equal(seen, want) {
		t.Errorf("sluiced saw %q, want %q", seen, want)
	}
}

func TestSocketFromEnv(t *testing.T) {
	t.Setenv(SocketEnv, "/nonexistent/sluiced.sock")
	good := domainXML(t, "web", "/run/sluice/vms/web.sock", 5, libvirt.Settings{})
	r := runHook(nil, good, "--timeout", "2s", "web", "prepare", "begin", "-")
	if r.code != ExitError || !strings.Contains(r.stderr, "/nonexistent/sluiced.sock") {
		t.Errorf("got %+v", r)
	}
}

// TestPositionalConvention: libvirt runs the hook as HOOK [flags] DOMAIN
// OPERATION SUBOP EXTRA. Whatever a domain is named, and whatever EXTRA
// is, they are positional: never a subcommand, a flag or help.
func TestPositionalConvention(t *testing.T) {
	noVolumeAccess(t)
	for _, name := range []string{"web", "help", "completion", "version", "cuda-worker"} {
		api := newFakeAPI()
		xml := domainXML(t, name, "/run/sluice/vms/"+name+".sock", 5, libvirt.Settings{})
		if r := runHook(api, xml, "--timeout", "5s", name, "prepare", "begin", "-"); r.code != ExitOK || r.stdout != "" {
			t.Errorf("domain %q: %+v", name, r)
		}
		if _, ok := api.vms[name]; !ok {
			t.Errorf("domain %q: prepare did not create its VM", name)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"web", "started", "begin", "--help"}, ExitOK, ""},      // EXTRA is not a flag
		{[]string{"web", "migrate", "begin", "--timeout=0"}, ExitOK, ""}, // nor here
		{[]string{"web", "stopped", "end"}, ExitOK, ""},                  // EXTRA may be missing
		{[]string{"web", "prepare"}, ExitUsage, "want DOMAIN OPERATION"}, // SUBOP may not
		{[]string{"--timeout", "5", "web", "x", "y", "-"}, ExitUsage, `"--timeout"`},
		{[]string{"--timeout", "-1s", "web", "x", "y", "-"}, ExitUsage, "--timeout must be positive"},
	} {
		r := runHook(newFakeAPI(), plainDomain, tc.args...)
		if r.code != tc.code || r.stdout != "" || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%q: %+v; want exit %d and %q", tc.args, r, tc.code, tc.msg)
		}
	}
}
