package cli

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

const hostToken = "host-token-0123456789abcdef"

// withToken answers 401, as sluiced's TCP listener does, to a request
// without the token.
func withToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+hostToken {
			reply(w, http.StatusUnauthorized, hostapi.Error{Code: hostapi.CodeUnauthorized, Message: "missing or wrong bearer token"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostOverTCP: --socket tcp://ADDR with the token file (a flag or the
// environment) reaches the daemon; a wrong token is the daemon's refusal;
// none is a usage error.
func TestHostOverTCP(t *testing.T) {
	srv := httptest.NewServer(withToken(newFakeDaemon().mux()))
	defer srv.Close()
	sock := "tcp://" + srv.Listener.Addr().String()
	tok := writeFile(t, "token", hostToken+"\n")

	r := runCLI(t.Context(), nil, false, "--socket", sock, "--host-token-file", tok, "vm", "list")
	if r.code != ExitOK || r.stdout != wantVMTable {
		t.Fatalf("vm list over TCP: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t.Context(), map[string]string{SocketEnv: sock, HostTokenFileEnv: tok}, false, "version")
	if r.code != ExitOK || !strings.Contains(r.stdout, "daemon: sluiced 0.3.0") {
		t.Fatalf("version from the environment: %d %q %q", r.code, r.stdout, r.stderr)
	}
	wrong := writeFile(t, "wrong", "another-token-0123456789")
	r = runCLI(t.Context(), nil, false, "--socket", sock, "--host-token-file", wrong, "vm", "list")
	if r.code != ExitError || !strings.Contains(r.stderr, "wrong bearer token") {
		t.Fatalf("a wrong token: %d %q", r.code, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--socket", sock, "vm", "list"}, ExitUsage, "needs --host-token-file"},
		{[]string{"--socket", "tcp://", "--host-token-file", tok, "vm", "list"}, ExitUsage, "want tcp://HOST:PORT"},
		{[]string{"--socket", sock, "--host-token-file", tok, "--host-ca", tok, "vm", "list"}, ExitUsage, "need --socket tls://"},
		{[]string{"--host-ca", tok, "vm", "list"}, ExitUsage, "are for --socket tls://"},
		{[]string{"--socket", sock, "--host-token-file", writeFile(t, "empty", "\n"), "vm", "list"}, ExitError, "is empty"},
	} {
		r := runCLI(t.Context(), nil, false, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: %d %q, want %d %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
		if strings.Contains(r.stderr, hostToken) {
			t.Errorf("%q prints the token: %q", tc.args, r.stderr)
		}
	}
}

// TestHostOverTLS: tls://ADDR verifies the daemon's certificate against
// --host-ca; without it the system's CAs refuse a test certificate.
func TestHostOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(withToken(newFakeDaemon().mux()))
	defer srv.Close()
	sock := "tls://" + srv.Listener.Addr().String()
	tok := writeFile(t, "token", hostToken)
	ca := writeFile(t, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))

	r := runCLI(t.Context(), nil, false, "--socket", sock, "--host-token-file", tok, "--host-ca", ca, "vm", "list")
	if r.code != ExitOK || r.stdout != wantVMTable {
		t.Fatalf("vm list over TLS: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t.Context(), nil, false, "--socket", sock, "--host-token-file", tok, "vm", "list")
	if r.code != ExitError || !strings.Contains(r.stderr, "check --host-ca") {
		t.Fatalf("an untrusted certificate: %d %q", r.code, r.stderr)
	}
	r = runCLI(t.Context(), nil, false, "--socket", sock, "--host-token-file", tok, "--host-ca", tok, "vm", "list")
	if r.code != ExitError || !strings.Contains(r.stderr, "holds no PEM certificate") {
		t.Fatalf("a CA file without a certificate: %d %q", r.code, r.stderr)
	}
	r = runCLI(t.Context(), nil, false, "--socket", sock, "--host-token-file", tok, "--host-cert", ca, "vm", "list")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "go together") {
		t.Fatalf("--host-cert alone: %d %q", r.code, r.stderr)
	}
}
