// Package apiserver serves the host API (api/hostapi) over HTTP on a UNIX
// socket, and optionally on a TCP address. On the socket, access is checked
// with the connecting process's credentials (SO_PEERCRED): root and the
// daemon's own user are allowed. Over TCP (ListenTCP), every request must
// carry the bearer token of the daemon's token file, optionally over TLS
// with client certificates. Errors are mapped to HTTP statuses here, once,
// with hostapi.StatusOf.
package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/hostmetrics"
	"github.com/sluice-gpu/sluice/internal/sockfile"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// Service is what the host API needs from the daemon.
type Service interface {
	Version(ctx context.Context) (hostapi.Version, error)
	CreateVM(ctx context.Context, req hostapi.CreateVMRequest) (hostapi.VM, error)
	DeleteVM(ctx context.Context, name string) error
	GetVM(ctx context.Context, name string) (hostapi.VM, error)
	ListVMs(ctx context.Context) ([]hostapi.VM, error)
	Usage(ctx context.Context, name string) (hostapi.Usage, error)
	Stats(ctx context.Context) (hostapi.Stats, error)
	// UpdateVM applies the fields of req that are set. The handler has
	// checked that at least one is, and that they are in range, but for the
	// weight: the service checks it (hostapi.CheckWeight) as in CreateVM,
	// for every caller, so that one place gives one error.
	UpdateVM(ctx context.Context, name string, req hostapi.UpdateVMRequest) (hostapi.VM, error)
	Policy(ctx context.Context) (hostapi.PolicyState, error)
	// SetPolicy switches to st.Policy, which the handler has checked is one
	// of the hostapi.Policy* constants. st.Accounting is passed as sent:
	// the service decides what a value other than its own means.
	SetPolicy(ctx context.Context, st hostapi.PolicyState) (hostapi.PolicyState, error)
}

// Handler returns the host API's HTTP handler.
func Handler(s Service) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK)(s.Version(r.Context()))
	})
	mux.HandleFunc("POST /v1/vms", func(w http.ResponseWriter, r *http.Request) {
		var req hostapi.CreateVMRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		reply(w, http.StatusCreated)(s.CreateVM(r.Context(), req))
	})
	mux.HandleFunc("GET /v1/vms", func(w http.ResponseWriter, r *http.Request) {
		vms, err := s.ListVMs(r.Context())
		if vms == nil {
			vms = []hostapi.VM{} // the contract says array, never null
		}
		reply(w, http.StatusOK)(vms, err)
	})
	mux.HandleFunc("GET /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK)(s.GetVM(r.Context(), r.PathValue("name")))
	})
	mux.HandleFunc("DELETE /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.DeleteVM(r.Context(), r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/vms/{name}/usage", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK)(s.Usage(r.Context(), r.PathValue("name")))
	})
	handleScheduling(mux, s)
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Stats(r.Context())
		reply(w, http.StatusOK)(withArrays(st), err)
	})
	handleMetrics(mux, s)
	return mux
}

// MetricsHandler serves GET /metrics alone, for the TCP listener a
// Prometheus server scrapes (sluiced --metrics-listen): the host API's other
// routes stay on the UNIX socket, behind its credential check.
func MetricsHandler(s Service) http.Handler {
	mux := http.NewServeMux()
	handleMetrics(mux, s)
	return mux
}

// handleMetrics adds GET /metrics: one snapshot per scrape, as /v1/stats
// (internal/hostmetrics).
func handleMetrics(mux *http.ServeMux, s Service) {
	mux.Handle("GET /metrics", hostmetrics.Handler(s.Stats, writeError))
}

// handleScheduling adds the routes that change how the GPU is shared.
func handleScheduling(mux *http.ServeMux, s Service) {
	mux.HandleFunc("PATCH /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		var req hostapi.UpdateVMRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := checkUpdate(req); err != nil {
			writeError(w, fmt.Errorf("vm %q: %w", r.PathValue("name"), err))
			return
		}
		reply(w, http.StatusOK)(s.UpdateVM(r.Context(), r.PathValue("name"), req))
	})
	mux.HandleFunc("GET /v1/policy", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK)(s.Policy(r.Context()))
	})
	mux.HandleFunc("PUT /v1/policy", func(w http.ResponseWriter, r *http.Request) {
		var st hostapi.PolicyState
		if err := decode(r, &st); err != nil {
			writeError(w, err)
			return
		}
		if err := checkPolicy(st.Policy); err != nil {
			writeError(w, err)
			return
		}
		reply(w, http.StatusOK)(s.SetPolicy(r.Context(), st))
	})
}

// withArrays replaces nil slices, which encode as null, with empty ones:
// the contract says arrays.
func withArrays(st hostapi.Stats) hostapi.Stats {
	if st.VMs == nil {
		st.VMs = []hostapi.VMStats{}
	}
	for i := range st.VMs {
		if st.VMs[i].ChannelStats == nil {
			st.VMs[i].ChannelStats = []hostapi.ChannelStats{}
		}
	}
	return st
}

// policies are the names PUT /v1/policy takes, in the order errors list them.
var policies = []string{hostapi.PolicyNone, hostapi.PolicyDFQ, hostapi.PolicyCap, hostapi.PolicyTimeslice}

// checkUpdate refuses an update that changes nothing or is out of the
// contract's range, so that every service sees the same valid requests.
func checkUpdate(req hostapi.UpdateVMRequest) error {
	if req.Weight == nil && req.Cap == nil && req.SyscallWindowNs == nil && req.SyscallBatch == nil && req.Memory == nil && req.MaxCommandNs == nil && req.Owner == nil {
		return fmt.Errorf("nothing to change: set weight, cap, syscall_window_ns, syscall_batch, memory, max_command_ns or owner: %w", hostapi.ErrInvalid)
	}
	if m := req.MaxCommandNs; m != nil && *m != 0 && (*m < int64(hostapi.MinMaxCommand) || *m > int64(hostapi.MaxMaxCommand)) {
		return fmt.Errorf("max_command_ns %d: want 0 (the daemon's default) or %d to %d: %w", *m, int64(hostapi.MinMaxCommand), int64(hostapi.MaxMaxCommand), hostapi.ErrInvalid)
	}
	if w := req.SyscallWindowNs; w != nil && (*w < 0 || *w > int64(time.Second)) {
		return fmt.Errorf("syscall_window_ns %d: want 0 to %d: %w", *w, int64(time.Second), hostapi.ErrInvalid)
	}
	if b := req.SyscallBatch; b != nil && (*b < 1 || *b > proxyproto.MaxBatch) {
		return fmt.Errorf("syscall_batch %d: want 1 to %d: %w", *b, proxyproto.MaxBatch, hostapi.ErrInvalid)
	}
	// JSON has no NaN or infinities, but the negated test catches them too.
	if c := req.Cap; c != nil && !(*c >= 0 && *c <= 1) {
		return fmt.Errorf("cap %v: want 0 (none) or a share in (0, 1]: %w", *c, hostapi.ErrInvalid)
	}
	return nil
}

func checkPolicy(p string) error {
	if slices.Contains(policies, p) {
		return nil
	}
	return fmt.Errorf("policy %q: want one of %s: %w", p, strings.Join(policies, ", "), hostapi.ErrInvalid)
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding request body: %v: %w", err, hostapi.ErrInvalid)
	}
	// A second value or trailing garbage means the body is not the one
	// object the route takes.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("decoding request body: data after the object: %w", hostapi.ErrInvalid)
	}
	return nil
}

// reply writes a value or an error, so handlers read as one line.
func reply(w http.ResponseWriter, status int) func(any, error) {
	return func(v any, err error) {
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
}

func writeError(w http.ResponseWriter, err error) {
	status, code := hostapi.StatusOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(hostapi.Error{Code: code, Message: err.Error()})
}

// Server is the host API on a UNIX socket, or on TCP (ListenTCP).
type Server struct {
	ln    net.Listener
	http  *http.Server
	path  string
	token *tokenGate // the TCP listener's; nil on the socket
}

// Listen creates the socket (replacing a stale one) with the given mode.
func Listen(path string, mode os.FileMode, h http.Handler) (*Server, error) {
	if err := sockfile.RemoveStale(path, 5*time.Second); err != nil {
		if errors.Is(err, sockfile.ErrInUse) {
			return nil, fmt.Errorf("host api socket %s: another daemon is listening", path)
		}
		return nil, fmt.Errorf("host api socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("setting mode of %s: %w", path, err)
	}
	return unixServer(ln, path, h), nil
}

// unixServer serves h on ln, a UNIX socket at path.
func unixServer(ln net.Listener, path string, h http.Handler) *Server {
	return &Server{ln: ln, path: path, http: &http.Server{
		Handler:           authorize(h),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       withPeerCred,
	}}
}

// Serve serves until Shutdown.
func (s *Server) Serve() error {
	if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving host api: %w", err)
	}
	return nil
}

// Shutdown stops accepting, waits for requests in flight and removes the
// socket.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	// http.Server closes only listeners Serve has taken; close ours too so
	// the socket goes even if Serve never ran or has not started yet.
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) && err == nil {
		err = fmt.Errorf("closing host api socket: %w", cerr)
	}
	return err
}
