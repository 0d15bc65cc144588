package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequireToken: whatever Authorization header a client sends, the
// handler is reached only with the token itself (any case of the scheme,
// white space around the token), and every refusal is the same answer, so
// none echoes what was sent.
func FuzzRequireToken(f *testing.F) {
	for _, s := range []string{"Bearer " + testToken, "bearer  " + testToken + " ", "Bearer", "Basic " + testToken, "", "Bearer " + testToken + "\x00"} {
		f.Add(s)
	}
	hash, err := newTokenHash([]byte(testToken))
	if err != nil {
		f.Fatal(err)
	}
	g := &tokenGate{}
	g.hash.Store(&hash)
	reached := false
	h := requireToken(g, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	send := func(header string) *httptest.ResponseRecorder {
		reached = false
		r := httptest.NewRequest(http.MethodGet, "/v1/version", nil)
		r.Header["Authorization"] = []string{header} // as sent, not canonicalised
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	refusal := send("").Body.String()
	f.Fuzz(func(t *testing.T, header string) {
		w := send(header)
		scheme, tok, _ := strings.Cut(header, " ")
		want := strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(tok) == testToken
		if reached != want {
			t.Fatalf("header %q: reached %v, want %v", header, reached, want)
		}
		if !reached && (w.Code != http.StatusUnauthorized || w.Body.String() != refusal) {
			t.Fatalf("header %q: %d %s", header, w.Code, w.Body)
		}
	})
}
