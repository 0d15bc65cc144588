package server

import (
	"fmt"
	"net/http"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// WhoAmI answers who the caller's token says it is.
func (s *Server) WhoAmI(w http.ResponseWriter, r *http.Request) {
	p := principal(r.Context())
	s.reply(w, r, http.StatusOK, controllerapi.WhoAmI{TokenId: p.TokenID, Name: p.Name, Role: controllerapi.Role(p.Role),
		Tenant: ptrIfSet(p.Tenant), Host: ptrIfSet(p.Host), Version: s.cfg.Version}, nil)
}

// ListTokens lists every token (operator).
func (s *Server) ListTokens(w http.ResponseWriter, r *http.Request) {
	out, err := func() ([]controllerapi.Token, error) {
		if err := requireOperator(principal(r.Context())); err != nil {
			return nil, err
		}
		toks, err := s.cfg.Store.ListTokens(r.Context())
		out := make([]controllerapi.Token, 0, len(toks))
		for _, t := range toks {
			out = append(out, apiToken(t))
		}
		return out, err
	}()
	s.reply(w, r, http.StatusOK, out, err)
}

// CreateToken makes a token (operator) and answers its secret, once.
func (s *Server) CreateToken(w http.ResponseWriter, r *http.Request) {
	out, err := func() (controllerapi.NewToken, error) {
		ctx := r.Context()
		p := principal(ctx)
		if err := requireOperator(p); err != nil {
			return controllerapi.NewToken{}, err
		}
		var req controllerapi.CreateTokenRequest
		if err := decodeBody(w, r, &req); err != nil {
			return controllerapi.NewToken{}, err
		}
		t, err := checkTokenRequest(req)
		if err != nil {
			return controllerapi.NewToken{}, err
		}
		secret, id, err := auth.NewSecret()
		if err != nil {
			return controllerapi.NewToken{}, err
		}
		t.ID, t.Hash, t.Created, t.CreatedBy = id, auth.Hash(secret), s.now(), p.Actor()
		detail := fmt.Sprintf("name %q, role %s", t.Name, t.Role)
		if t.Tenant != "" {
			detail += ", tenant " + t.Tenant
		}
		if t.Host != "" {
			detail += ", host " + t.Host
		}
		if err := s.cfg.Store.CreateToken(ctx, t, s.event(ctx, "token.create", id, detail)); err != nil {
			return controllerapi.NewToken{}, err
		}
		return controllerapi.NewToken{Token: apiToken(t), Secret: secret}, nil
	}()
	s.reply(w, r, http.StatusCreated, out, err)
}

func checkTokenRequest(req controllerapi.CreateTokenRequest) (fleet.Token, error) {
	t := fleet.Token{Name: req.Name, Role: fleet.Role(req.Role)}
	if req.Tenant != nil {
		t.Tenant = *req.Tenant
	}
	if req.Host != nil {
		t.Host = *req.Host
	}
	if t.Name == "" || len(t.Name) > 128 {
		return t, invalid("name", "field name is required, at most 128 bytes")
	}
	if req.Role == "" {
		return t, invalid("role", "field role is required: operator, tenant or host")
	}
	if !t.Role.Valid() {
		return t, invalid("role", "field role %q: want operator, tenant or host", req.Role)
	}
	if t.Role == fleet.RoleTenant {
		if err := checkName("tenant", t.Tenant); err != nil {
			return t, err
		}
	} else if t.Tenant != "" {
		return t, invalid("tenant", "field tenant is only for role tenant")
	}
	if t.Role == fleet.RoleHost {
		if err := checkName("host", t.Host); err != nil {
			return t, err
		}
	} else if t.Host != "" {
		return t, invalid("host", "field host is only for role host")
	}
	return t, nil
}

// RevokeToken revokes token id (operator).
func (s *Server) RevokeToken(w http.ResponseWriter, r *http.Request, id string) {
	err := func() error {
		ctx := r.Context()
		if err := requireOperator(principal(ctx)); err != nil {
			return err
		}
		return withField(s.cfg.Store.RevokeToken(ctx, id, s.now(), s.event(ctx, "token.revoke", id, "")), "id")
	}()
	s.reply(w, r, http.StatusNoContent, nil, err)
}

// ListEvents answers the audit log, newest first (operator).
func (s *Server) ListEvents(w http.ResponseWriter, r *http.Request, params controllerapi.ListEventsParams) {
	out, err := func() ([]controllerapi.Event, error) {
		ctx := r.Context()
		if err := requireOperator(principal(ctx)); err != nil {
			return nil, err
		}
		limit := 100
		if params.Limit != nil {
			limit = *params.Limit
			if limit < 1 || limit > 10000 {
				return nil, invalid("limit", "parameter limit %d: want 1 to 10000", limit)
			}
		}
		var since = s.now().AddDate(-100, 0, 0)
		if params.Since != nil {
			if params.Since.Year() < 1970 || params.Since.Year() >= 2262 {
				return nil, invalid("since", "parameter since: want a time from 1970 to 2261")
			}
			since = *params.Since
		}
		evs, err := s.cfg.Store.ListEvents(ctx, since, limit)
		out := make([]controllerapi.Event, 0, len(evs))
		for _, e := range evs {
			out = append(out, apiEvent(e))
		}
		return out, err
	}()
	s.reply(w, r, http.StatusOK, out, err)
}
