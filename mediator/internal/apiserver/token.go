package apiserver

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// tokenHash is the SHA-256 of the TCP host API's token. The token itself
// is not kept: nothing can log or print it.
type tokenHash [sha256.Size]byte

const errUnauthorized = "missing or wrong bearer token (Authorization: Bearer TOKEN, the token of sluiced's token file)"

// newTokenHash hashes the token file's content, its surrounding white
// space dropped.
func newTokenHash(file []byte) (tokenHash, error) {
	tok := bytes.TrimSpace(file)
	if len(tok) < MinTokenLength {
		return tokenHash{}, fmt.Errorf("tcp host api token file: the token has %d bytes, want at least %d", len(tok), MinTokenLength)
	}
	if bytes.ContainsAny(tok, " \t\r\n") {
		return tokenHash{}, fmt.Errorf("tcp host api token file: the token is more than one word")
	}
	return sha256.Sum256(tok), nil
}

// matches compares a presented token's hash with the token's in constant
// time: hashing first makes the time independent of the token's length too.
func (t tokenHash) matches(presented string) bool {
	h := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(h[:], t[:]) == 1
}

// tokenGate holds the hash of the token in force, which a reload of the
// token file replaces.
type tokenGate struct {
	path string
	hash atomic.Pointer[tokenHash]
}

// newTokenGate reads the token file.
func newTokenGate(path string) (*tokenGate, error) {
	g := &tokenGate{path: path}
	return g, g.reload()
}

// reload reads the token file again; one that fails the checks leaves the
// token in force as it was.
func (g *tokenGate) reload() error {
	h, err := readToken(g.path)
	if err != nil {
		return err
	}
	g.hash.Store(&h)
	return nil
}

// bearer extracts the token of an Authorization header; ok is false for
// another scheme or none.
func bearer(header string) (string, bool) {
	scheme, tok, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// requireToken serves h to requests that carry the token and answers 401,
// with an Error body that does not echo what was sent, to the others.
func requireToken(g *tokenGate, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := bearer(r.Header.Get("Authorization")); !ok || !g.hash.Load().matches(tok) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluiced"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(hostapi.Error{Code: hostapi.CodeUnauthorized, Message: errUnauthorized})
			return
		}
		h.ServeHTTP(w, r)
	})
}
