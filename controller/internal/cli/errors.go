package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// usageError marks a bad command line: exit code 2 and a --help hint.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// vmError names the VM in a failure. For not-found and already-exists the
// daemon's wording is replaced by the sentinel's, so that scripts and humans
// see one stable message ("vm \"x\": not found").
func vmError(name string, err error) error {
	for _, s := range []error{hostapi.ErrNotFound, hostapi.ErrExists} {
		if errors.Is(err, s) {
			return fmt.Errorf("vm %q: %w", clean(name), s)
		}
	}
	prefix := fmt.Sprintf("vm %q", clean(name))
	if strings.HasPrefix(err.Error(), prefix) { // the daemon named it already
		return err
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// describe is the message printed after "sluicectl: " for err. A daemon that
// cannot be reached gets one clear sentence instead of the transport chain.
func (a *app) describe(err error) string {
	var oe *net.OpError
	if errors.Is(err, hostapi.ErrUnavailable) && errors.As(err, &oe) {
		switch {
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
			return fmt.Sprintf("cannot reach sluiced at %s: is it running? (set --socket or %s)", a.socket, SocketEnv)
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			return fmt.Sprintf("cannot reach sluiced at %s: permission denied (run as root or as a member of the socket's group)", a.socket)
		case oe.Op == "tls handshake":
			return fmt.Sprintf("cannot reach sluiced at %s: %v (check --host-ca, --host-cert and --host-key)", a.socket, oe.Err)
		default:
			return fmt.Sprintf("cannot reach sluiced at %s: %v", a.socket, oe.Err)
		}
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return clean(err.Error())
}
