package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// apiError is an error with its HTTP status, code and offending field.
type apiError struct {
	status int
	code   controllerapi.ErrorCode
	field  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func invalid(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: controllerapi.Invalid, field: field, msg: fmt.Sprintf(format, args...)}
}

func forbidden(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusForbidden, code: controllerapi.Forbidden, field: field, msg: fmt.Sprintf(format, args...)}
}

func unauthenticated(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, code: controllerapi.Unauthenticated, msg: msg}
}

// withField names field in err's answer when err maps to a sentinel.
func withField(err error, field string) error {
	if err == nil {
		return nil
	}
	if ae := asAPIError(err); ae.status != http.StatusInternalServerError {
		ae.field = field
		return ae
	}
	return err
}

// sentinels maps the store's errors to the wire, once.
var sentinels = []struct {
	err    error
	status int
	code   controllerapi.ErrorCode
}{
	{fleet.ErrNotFound, http.StatusNotFound, controllerapi.NotFound},
	{fleet.ErrExists, http.StatusConflict, controllerapi.Exists},
	{fleet.ErrConflict, http.StatusConflict, controllerapi.Conflict},
	{fleet.ErrNoCapacity, http.StatusConflict, controllerapi.NoCapacity},
}

// asAPIError maps err to its answer; an unknown error is internal.
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return &apiError{status: s.status, code: s.code, msg: err.Error()}
		}
	}
	return &apiError{status: http.StatusInternalServerError, code: controllerapi.Internal, msg: "internal error"}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := asAPIError(err)
	if ae.status == http.StatusInternalServerError {
		s.cfg.Log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	body := controllerapi.Error{Code: ae.code, Message: ae.msg}
	if ae.field != "" {
		body.Field = &ae.field
	}
	writeJSON(w, ae.status, body)
}

// reply writes v with status, or the error.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// paramError answers a path or query parameter the generated router could
// not bind.
func (s *Server) paramError(w http.ResponseWriter, r *http.Request, err error) {
	var inv *controllerapi.InvalidParamFormatError
	var req *controllerapi.RequiredParamError
	switch {
	case errors.As(err, &inv):
		s.writeError(w, r, invalid(inv.ParamName, "parameter %s: %v", inv.ParamName, inv.Err))
	case errors.As(err, &req):
		s.writeError(w, r, invalid(req.ParamName, "parameter %s is required", req.ParamName))
	default:
		s.writeError(w, r, invalid("", "%v", err))
	}
}
