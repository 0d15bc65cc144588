// Package pgtest starts a throwaway PostgreSQL server for tests, from the
// machine's PostgreSQL packages (Debian's postgresql:
// /usr/lib/postgresql/VERSION/bin/initdb and pg_ctl): a new cluster in a
// temporary directory, listening on a UNIX socket in that directory only
// (no TCP port to collide on), trusting local connections, stopped and
// removed by Stop.
//
// PostgreSQL refuses to run as root; run as root, the server runs as the
// user "postgres" (which the Debian package creates), else "nobody".
//
// Without the binaries, Start returns an error wrapping ErrNotInstalled, on
// which tests fail naming the package (internal/testdeps).
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
)

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin or on PATH; install Debian's postgresql package")

// superuser is the cluster's superuser role, whatever the OS user.
const superuser = "sluice"

// Server is a running throwaway PostgreSQL server.
type Server struct {
	dir     string // the temporary directory: data/, the socket, the log
	bin     string
	cred    *syscall.Credential
	created atomic.Int64
}

// BinDir returns the directory holding initdb and pg_ctl: the newest
// /usr/lib/postgresql/*/bin, else that of initdb on PATH.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && isExec(filepath.Join(filepath.Dir(p), "pg_ctl")) {
		return filepath.Dir(p), nil
	}
	return "", ErrNotInstalled
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Start initialises a cluster in a new temporary directory and starts it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	// The socket's path must fit in sun_path (108 bytes): a short
	// directory under /tmp rather than a test's long TempDir.
	dir, err := os.MkdirTemp("/tmp", "sluice-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating the server's directory: %w", err)
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = unprivileged(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("handing %s to the server's user: %w", dir, err)
		}
	}
	if err := s.run(ctx, "initdb", "-D", s.data(), "-U", superuser, "--auth=trust", "--encoding=UTF8",
		"--no-locale", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Durability of the server itself is not under test (the tests kill
	// controllers, never PostgreSQL): fsync off makes it quick.
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -c fsync=off -c full_page_writes=off -c max_connections=200", dir)
	if err := s.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", s.data(), "-l", filepath.Join(dir, "server.log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	return s, nil
}

// unprivileged is the user the server runs as when the tests run as root.
func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root and there is no user postgres or nobody to run PostgreSQL as (it refuses root): create one with useradd")
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs a PostgreSQL program as the server's user.
func (s *Server) run(ctx context.Context, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("running %s %s: %w\n%s", prog, strings.Join(args, " "), err, out)
	}
	return nil
}

// URL is the connection URL of database db on the server.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s@/%s?host=%s&sslmode=disable", superuser, db, s.dir)
}

// CreateDatabase creates a new, empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d", s.created.Add(1))
	db, err := sql.Open("pgx", s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connecting to the test server: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return s.URL(name), nil
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	err := s.run(context.Background(), "pg_ctl", "stop", "-w", "-m", "immediate", "-D", s.data())
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}
