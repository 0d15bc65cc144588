// Package apiserver serves the host API (api/hostapi) over HTTP on a UNIX
// socket. Access is checked with the connecting process's credentials
// (SO_PEERCRED): root and the daemon's own user are allowed. Errors are
// mapped to HTTP statuses here, once, with hostapi.StatusOf.
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
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
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
		reply(w, http.StatusOK)(s.ListVMs(r.Context()))
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
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK)(s.Stats(r.Context()))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.Stats(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		writeMetrics(w, st)
	})
	return mux
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding request body: %v: %w", err, hostapi.ErrInvalid)
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

// Server is the host API on a UNIX socket.
type Server struct {
	ln   net.Listener
	http *http.Server
	path string
}

// Listen creates the socket (replacing a stale one) with the given mode.
func Listen(path string, mode os.FileMode, h http.Handler) (*Server, error) {
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("host api socket %s: another daemon is listening", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
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
	s := &Server{ln: ln, path: path, http: &http.Server{
		Handler:           authorize(h),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       withPeerCred,
	}}
	return s, nil
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
	return s.http.Shutdown(ctx)
}
