package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// authenticate lets through only requests with a valid, unrevoked bearer
// token, with its principal in the request's context.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := auth.BearerSecret(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-controller"`)
			s.writeError(w, r, unauthenticated("missing bearer token (Authorization: Bearer TOKEN)"))
			return
		}
		tok, err := s.cfg.Store.TokenByHash(r.Context(), auth.Hash(secret))
		switch {
		case errors.Is(err, fleet.ErrNotFound):
			s.writeError(w, r, unauthenticated("unknown token"))
			return
		case err != nil:
			s.writeError(w, r, err)
			return
		case !tok.Revoked.IsZero():
			s.writeError(w, r, unauthenticated("the token was revoked"))
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.With(r.Context(), auth.FromToken(tok))))
	})
}

// principal is the caller; authenticate put it there for every request.
func principal(ctx context.Context) auth.Principal {
	p, _ := auth.From(ctx)
	return p
}

// requireOperator refuses everyone but operators.
func requireOperator(p auth.Principal) error {
	if !p.IsOperator() {
		return forbidden("", "this needs an operator token; yours is a %s token", p.Role)
	}
	return nil
}

// requireRole refuses principals whose role is not among roles.
func requireRole(p auth.Principal, roles ...fleet.Role) error {
	for _, r := range roles {
		if p.Role == r {
			return nil
		}
	}
	return forbidden("", "a %s token may not do this", p.Role)
}

// event is an audit event made by the caller now.
func (s *Server) event(ctx context.Context, action, target, detail string) fleet.Event {
	return fleet.Event{Time: s.now(), Actor: principal(ctx).Actor(), Action: action, Target: target, Detail: detail}
}
