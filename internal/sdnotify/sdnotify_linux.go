// Package sdnotify speaks the two small systemd protocols a daemon needs to
// keep descriptors across its restarts: sd_notify (a datagram to
// $NOTIFY_SOCKET, here to store descriptors in the service manager's fd
// store, FDSTORE=1 with FDNAME=, and to remove them, FDSTOREREMOVE=1) and
// the descriptors passed back at the next start ($LISTEN_PID, $LISTEN_FDS,
// $LISTEN_FDNAMES, from fd 3 on). No libsystemd: the protocols are a few
// lines each.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenFDsStart is the first descriptor systemd passes.
const listenFDsStart = 3

// maxFDsPerMessage bounds the descriptors one datagram carries (the
// kernel's SCM_MAX_FD is 253).
const maxFDsPerMessage = 250

// ErrNoSocket is returned by Notifier methods when the process was not
// given a notification socket (not started by systemd, or NotifyAccess=
// none).
var ErrNoSocket = errors.New("no $NOTIFY_SOCKET")

// Notifier sends notifications to the service manager.
type Notifier struct{ addr *net.UnixAddr }

// FromEnv is the notifier of $NOTIFY_SOCKET in getenv's environment; with
// none, every call fails with ErrNoSocket. An address starting with '@'
// is in the abstract namespace.
func FromEnv(getenv func(string) string) *Notifier {
	path := getenv("NOTIFY_SOCKET")
	if path == "" || (path[0] != '/' && path[0] != '@') {
		return &Notifier{}
	}
	return &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
}

// Enabled reports whether there is a service manager to notify.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// Store puts fds into the fd store under name (one name may hold several
// descriptors; systemd drops one that hangs up).
func (n *Notifier) Store(name string, fds ...int) error {
	if err := checkName(name); err != nil {
		return err
	}
	for len(fds) > 0 {
		k := min(len(fds), maxFDsPerMessage)
		if err := n.send("FDSTORE=1\nFDNAME="+name+"\n", fds[:k]); err != nil {
			return fmt.Errorf("storing fds %q: %w", name, err)
		}
		fds = fds[k:]
	}
	return nil
}

// Remove takes every descriptor stored under name out of the store.
func (n *Notifier) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := n.send("FDSTOREREMOVE=1\nFDNAME="+name+"\n", nil); err != nil {
		return fmt.Errorf("removing fds %q: %w", name, err)
	}
	return nil
}

// send sends one datagram with state and fds.
func (n *Notifier) send(state string, fds []int) error {
	if !n.Enabled() {
		return ErrNoSocket
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("creating a notification socket: %w", err)
	}
	defer unix.Close(fd)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	name := n.addr.Name
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	if err := unix.Sendmsg(fd, []byte(state), oob, &unix.SockaddrUnix{Name: name}, 0); err != nil {
		return fmt.Errorf("notifying %s: %w", n.addr.Name, err)
	}
	return nil
}

// checkName refuses a name systemd would: at most 255 printable ASCII
// characters, no ':'.
func checkName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("fd name %q: want 1 to 255 characters", name)
	}
	for _, r := range name {
		if r <= ' ' || r >= 0x7f || r == ':' {
			return fmt.Errorf("fd name %q: want printable ASCII without ':' or spaces", name)
		}
	}
	return nil
}

// Listened are the descriptors the service manager passed at start, by
// name, in the order passed.
type Listened map[string][]int

// Listen reads the descriptors systemd passed this process
// ($LISTEN_PID must be pid; $LISTEN_FDS of them from fd 3 on, named by
// $LISTEN_FDNAMES) and makes them close-on-exec. None passed: an empty
// map. The caller unsets the variables if its children must not see them.
func Listen(getenv func(string) string, pid int) (Listened, error) {
	return listenFrom(getenv, pid, listenFDsStart)
}

// listenFrom is Listen with the first descriptor at start.
func listenFrom(getenv func(string) string, pid, start int) (Listened, error) {
	out := Listened{}
	if getenv("LISTEN_PID") == "" {
		return out, nil
	}
	if p, err := strconv.Atoi(getenv("LISTEN_PID")); err != nil || p != pid {
		return out, nil // meant for another process
	}
	if getenv("LISTEN_FDS") == "" {
		return out, nil // none passed
	}
	n, err := strconv.Atoi(getenv("LISTEN_FDS"))
	if err != nil || n < 0 || n > 1<<16 {
		return out, fmt.Errorf("$LISTEN_FDS %q: want a count", getenv("LISTEN_FDS"))
	}
	names := strings.Split(getenv("LISTEN_FDNAMES"), ":")
	if getenv("LISTEN_FDNAMES") == "" {
		names = nil
	}
	for i := range n {
		fd := start + i
		unix.CloseOnExec(fd)
		name := "unknown" // systemd's name for one without
		if i < len(names) && names[i] != "" {
			name = names[i]
		}
		out[name] = append(out[name], fd)
	}
	return out, nil
}
