package ivshmem

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dialEnv makes the test binary a peer that dials the socket it names
// (TestMain), so that a test can connect as another user.
const dialEnv = "SLUICE_IVSHMEM_TEST_DIAL"

func TestMain(m *testing.M) {
	if path := os.Getenv(dialEnv); path != "" {
		os.Exit(dialAndHold(path))
	}
	os.Exit(m.Run())
}

// dialAndHold dials path, says "joined ID" or "refused: ERR" on stdout and,
// once joined, holds the connection until stdin closes.
func dialAndHold(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	c, err := Dial(ctx, path, 0)
	if err != nil {
		fmt.Printf("refused: %v\n", err)
		return 0
	}
	defer c.Close()
	fmt.Printf("joined %d\n", c.ID())
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// nobody is the user the foreign peers run as.
const nobody = 65534

// dialAs runs the test binary as uid:gid to dial the server at path and
// returns the first line it says (dialAndHold). The server's socket must be
// reachable by that user.
func dialAs(t *testing.T, path string, uid, gid uint32) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: connects as another user")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy that the other user may run: the test binary's own directory
	// is root's alone.
	dir, err := os.MkdirTemp("", "ivspeer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "peer")
	copyFile(t, self, bin)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), dialEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("peer as uid %d said %q: %v", uid, line, err)
	}
	return strings.TrimSpace(line)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

type refusal struct {
	cred Cred
	why  error
}

// credServer starts a server that other users can reach (the socket's
// directory searchable, the socket 0666) and reports refusals on a channel.
func credServer(t *testing.T, cfg ServerConfig) (*Server, <-chan peerEvent, <-chan refusal) {
	t.Helper()
	refused := make(chan refusal, 16)
	path := sockPath(t)
	if err := os.Chmod(filepath.Dir(path), 0o711); err != nil {
		t.Fatal(err)
	}
	cfg.SocketPath, cfg.SocketMode, cfg.Vectors = path, 0o666, 2
	cfg.OnRefuse = func(c Cred, why error) { refused <- refusal{c, why} }
	srv, _, events := testServer(t, cfg)
	return srv, events, refused
}

func recvRefusal(t *testing.T, ch <-chan refusal) refusal {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(guard):
		t.Fatal("no refusal")
		return refusal{}
	}
}

func TestForeignPeerRefused(t *testing.T) {
	var admits atomic.Int32
	srv, events, refused := credServer(t, ServerConfig{Owners: []Owner{{UID: 1000}}, OnAdmit: func() { admits.Add(1) }})

	said := dialAs(t, srv.cfg.SocketPath, nobody, nobody)
	if !strings.HasPrefix(said, "refused") {
		t.Fatalf("peer as uid %d: %q, want refused", nobody, said)
	}
	r := recvRefusal(t, refused)
	if !errors.Is(r.why, ErrForeignPeer) || r.cred.UID != nobody || r.cred.GID != nobody || r.cred.PID <= 0 {
		t.Fatalf("refusal %+v, want ErrForeignPeer for uid/gid %d and its pid", r, nobody)
	}
	select {
	case e := <-events:
		t.Fatalf("peer event %v for a refused peer", e)
	default:
	}
	if admits.Load() != 0 || len(srv.Peers()) != 0 {
		t.Fatalf("refused peer admitted (%d OnAdmit calls, peers %v)", admits.Load(), srv.Peers())
	}
}

func TestOwnerAdmitted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owner Owner
		want  bool
	}{
		{"uid", Owner{UID: nobody}, true},
		{"uid and gid", Owner{UID: nobody, GID: nobody, HasGID: true}, true},
		{"uid, other gid", Owner{UID: nobody, GID: 1, HasGID: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, events, refused := credServer(t, ServerConfig{Owners: []Owner{tc.owner}})
			said := dialAs(t, srv.cfg.SocketPath, nobody, nobody)
			if !tc.want {
				if r := recvRefusal(t, refused); !strings.HasPrefix(said, "refused") || !errors.Is(r.why, ErrForeignPeer) {
					t.Fatalf("owner %v, peer %d:%d: said %q, refusal %v; want refused", tc.owner, nobody, nobody, said, r.why)
				}
				return
			}
			var id uint16
			if _, err := fmt.Sscanf(said, "joined %d", &id); err != nil {
				t.Fatalf("owner %v, peer %d:%d: said %q, want joined", tc.owner, nobody, nobody, said)
			}
			if e := recvPeerEvent(t, events); e != (peerEvent{id, true}) {
				t.Fatalf("peer event %v, want %d joined", e, id)
			}
		})
	}
}

func TestRootAndOwnUIDAdmitted(t *testing.T) {
	s := &Server{uid: 1000}
	s.SetOwners([]Owner{{UID: 7, GID: 8, HasGID: true}})
	for _, tc := range []struct {
		cred Cred
		want bool
	}{
		{Cred{UID: 0, GID: 5}, true},
		{Cred{UID: 1000, GID: 5}, true},
		{Cred{UID: 7, GID: 8}, true},
		{Cred{UID: 7, GID: 9}, false},
		{Cred{UID: 8, GID: 8}, false},
		{Cred{UID: 1001, GID: 0}, false},
	} {
		if got := s.admits(tc.cred); got != tc.want {
			t.Errorf("admits(%+v) = %v, want %v", tc.cred, got, tc.want)
		}
	}
}

// TestSetOwners: owners set on a running server decide the connections
// that follow.
func TestSetOwners(t *testing.T) {
	srv, events, refused := credServer(t, ServerConfig{})
	if said := dialAs(t, srv.cfg.SocketPath, nobody, nobody); !strings.HasPrefix(said, "refused") {
		t.Fatalf("peer as uid %d before SetOwners: %q, want refused", nobody, said)
	}
	if r := recvRefusal(t, refused); !errors.Is(r.why, ErrForeignPeer) {
		t.Fatalf("refusal %v, want ErrForeignPeer", r.why)
	}
	srv.SetOwners([]Owner{{UID: nobody}})
	said := dialAs(t, srv.cfg.SocketPath, nobody, nobody)
	var id uint16
	if _, err := fmt.Sscanf(said, "joined %d", &id); err != nil {
		t.Fatalf("peer as uid %d after SetOwners: %q, want joined", nobody, said)
	}
	if e := recvPeerEvent(t, events); e != (peerEvent{id, true}) {
		t.Fatalf("peer event %v, want %d joined", e, id)
	}
}
