package hostapi

import (
	"errors"
	"net/http"
)

// Sentinel errors. The server maps them to an HTTP status and a Code once;
// the client maps them back, so callers check with errors.Is on both sides.
var (
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrInvalid     = errors.New("invalid request")
	ErrUnavailable = errors.New("unavailable")
)

// Error codes on the wire.
const (
	CodeNotFound    = "not_found"
	CodeExists      = "exists"
	CodeInvalid     = "invalid"
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
	// CodeForbidden is sent with 403 when the caller's credentials are
	// refused. No sentinel maps to it: it never comes from the service.
	CodeForbidden = "forbidden"
	// CodeUnauthorized is sent with 401 by the TCP host API to a request
	// without the bearer token, or with another. No sentinel maps to it.
	CodeUnauthorized = "unauthorized"
)

// Error is the body of every error response.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"error"`
}

var codes = []struct {
	err    error
	code   string
	status int
}{
	{ErrNotFound, CodeNotFound, http.StatusNotFound},
	{ErrExists, CodeExists, http.StatusConflict},
	{ErrInvalid, CodeInvalid, http.StatusBadRequest},
	{ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
}

// StatusOf maps an error to its HTTP status and wire code.
func StatusOf(err error) (int, string) {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// sentinelOf maps a wire code back to a sentinel error, or nil.
func sentinelOf(code string) error {
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}
