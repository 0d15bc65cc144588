package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/control"
)

func TestGuestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"vm", "exec", "web"}, "want NAME -- AGENT-ARGS", ExitUsage},
		{[]string{"vm", "exec", "web", "info"}, "want NAME -- AGENT-ARGS", ExitUsage},
		{[]string{"vm", "exec", "../x", "--", "info"}, `vm name "../x"`, ExitUsage},
		{[]string{"vm", "exec", "web", "--run-dir", dir, "--", "info"}, `vm "web": guest not running`, ExitError},
		{[]string{"vm", "stop", "web", "--run-dir", dir}, `vm "web": guest not running`, ExitError},
		{[]string{"vm", "start", "web", "--image", dir}, "make guest-image", ExitError},
	} {
		got := runCLI(t.Context(), nil, false, append([]string{"--socket", filepath.Join(dir, "none.sock")}, tt.args...)...)
		if got.code != tt.code || !strings.Contains(got.stderr, tt.want) {
			t.Errorf("%q: code %d, stderr %q; want code %d and %q", tt.args, got.code, got.stderr, tt.code, tt.want)
		}
	}
}

// TestVMExec runs vm exec against a fake guest: a run directory whose pid
// file names a live process called qemu, and a control socket answering
// like the agent.
func TestVMExec(t *testing.T) {
	base, err := os.MkdirTemp("", "ge") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	run := filepath.Join(base, "web")
	os.MkdirAll(run, 0o755)
	fakeQEMU(t, filepath.Join(run, "qemu.pid"))
	l, err := net.Listen("unix", filepath.Join(run, "control.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := control.NewReader(conn)
		for {
			m, err := r.Next()
			if err != nil {
				return
			}
			out := control.Message{Kind: control.KindHello, Agent: "fake"}
			if m.Kind == control.KindRequest {
				out = control.Message{Kind: control.KindResponse, ID: m.ID, Exit: 3,
					Stdout: strings.Join(m.Args, " ") + "\n", Stderr: "agent complains\n"}
			}
			b, _ := control.Encode(out)
			conn.Write(b)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := runCLI(ctx, nil, false, "vm", "exec", "web", "--run-dir", base, "--", "throttle", "--kernel", "100us")
	if got.stdout != "run throttle --kernel 100us\n" || got.stderr != "agent complains\n" || got.code != 3 {
		t.Errorf("vm exec: %+v", got)
	}
}

// fakeQEMU starts a long-running process whose name contains qemu and
// writes its pid to pidFile.
func fakeQEMU(t *testing.T, pidFile string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-qemu")
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess(bin, []string{bin, "60"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); p.Wait() })
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(p.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
