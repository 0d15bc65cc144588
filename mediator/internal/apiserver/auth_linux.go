package apiserver

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

type credKey struct{}

const errForbidden = "permission denied: only root and the daemon's user may use the host api"

// withPeerCred records the connecting process's uid in the context.
func withPeerCred(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, credKey{}, cred.Uid)
}

// authorize lets root and the daemon's own user through.
func authorize(h http.Handler) http.Handler {
	self := uint32(os.Getuid())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, ok := r.Context().Value(credKey{}).(uint32)
		if !ok || (uid != 0 && uid != self) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(hostapi.Error{Code: hostapi.CodeForbidden, Message: errForbidden})
			return
		}
		h.ServeHTTP(w, r)
	})
}
