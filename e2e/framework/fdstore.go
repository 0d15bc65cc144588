package framework

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

// FDStore stands in for systemd's fd store: the notification socket a
// daemon started with it (DaemonOptions.FDStore) stores descriptors on
// (FDSTORE=1 with FDNAME=, FDSTOREREMOVE=1), and the descriptors it passes
// to the next daemon started with it ($LISTEN_PID, $LISTEN_FDS,
// $LISTEN_FDNAMES, from fd 3 on), as systemd does across a restart.
type FDStore struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	fds  map[string][]*os.File
	done chan struct{}
}

// NewFDStore listens for a daemon's notifications; it is closed, with the
// descriptors it holds, when the spec ends.
func NewFDStore() *FDStore {
	ginkgo.GinkgoHelper()
	dir, err := mkdirTemp("sluice-fdstore-")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	s := &FDStore{path: filepath.Join(dir, "notify"), fds: map[string][]*os.File{}, done: make(chan struct{})}
	s.conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	go s.serve()
	ginkgo.DeferCleanup(func() {
		s.conn.Close()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, fs := range s.fds {
			for _, f := range fs {
				f.Close()
			}
		}
		os.RemoveAll(dir)
	})
	return s
}

func (s *FDStore) serve() {
	defer close(s.done)
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*253))
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		var fds []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				got, _ := unix.ParseUnixRights(&m)
				fds = append(fds, got...)
			}
		}
		s.apply(string(buf[:n]), fds)
	}
}

// apply acts on one notification as systemd would.
func (s *FDStore) apply(state string, fds []int) {
	vars := map[string]string{}
	for _, line := range strings.Split(state, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name := vars["FDNAME"]
	switch {
	case vars["FDSTORE"] == "1":
		for _, fd := range fds {
			if s.storedLocked(fd) { // systemd keeps one of a file stored twice
				unix.Close(fd)
				continue
			}
			s.fds[name] = append(s.fds[name], os.NewFile(uintptr(fd), name))
		}
		return
	case vars["FDSTOREREMOVE"] == "1":
		for _, f := range s.fds[name] {
			f.Close()
		}
		delete(s.fds, name)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// storedLocked reports whether fd is a file the store holds already (the
// same open file, as kcmp(2) tells).
func (s *FDStore) storedLocked(fd int) bool {
	pid := uintptr(os.Getpid())
	for _, fs := range s.fds {
		for _, f := range fs {
			r, _, errno := unix.Syscall6(unix.SYS_KCMP, pid, pid, 0 /* KCMP_FILE */, uintptr(fd), f.Fd(), 0)
			if errno == 0 && r == 0 {
				return true
			}
		}
	}
	return false
}

// Has reports whether a descriptor is stored under name.
func (s *FDStore) Has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fds[name]) > 0
}

// setup makes cmd a service started with the store: the notification
// socket in its environment and the stored descriptors passed. cmd must
// run a shell that sets LISTEN_PID to its own pid and execs the daemon
// (startStored).
func (s *FDStore) setup(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.fds))
	for name := range s.fds {
		names = append(names, name)
	}
	sort.Strings(names)
	var passed []string
	for _, name := range names {
		for _, f := range s.fds[name] {
			cmd.ExtraFiles = append(cmd.ExtraFiles, f)
			passed = append(passed, name)
		}
	}
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+s.path)
	if len(passed) > 0 {
		cmd.Env = append(cmd.Env, "LISTEN_FDS="+strconv.Itoa(len(passed)), "LISTEN_FDNAMES="+strings.Join(passed, ":"))
	}
}

// startStored starts path with args as a service of the store.
func (s *FDStore) startStored(path string, args ...string) *Proc {
	ginkgo.GinkgoHelper()
	// $LISTEN_PID is the service's pid: the shell's, which exec keeps.
	sh := append([]string{"-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"`, path}, args...)
	return startWith(s.setup, "/bin/sh", sh...)
}
