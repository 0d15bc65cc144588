package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

const testToken = "s3cret-token-0123456789abcdef"

// tokenFile writes content to a token file of the given mode.
func tokenFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// serveTCP starts the host API on a loopback port with c's token and TLS
// files and stops it when the test ends.
func serveTCP(t *testing.T, c TCPConfig, h http.Handler) string {
	t.Helper()
	c.Addr = "127.0.0.1:0"
	if c.TokenFile == "" {
		c.TokenFile = tokenFile(t, testToken+"\n", 0o600)
	}
	srv, err := ListenTCP(c, h)
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	return srv.Addr().String()
}

// TestTCPNeedsTheToken: over TCP nothing is served without the token, or
// with another (the metrics neither), and a 401 does not echo what was sent.
func TestTCPNeedsTheToken(t *testing.T) {
	f := newFake()
	addr := serveTCP(t, TCPConfig{}, Handler(f))
	for _, tc := range []struct{ name, path, auth string }{
		{"no header", "/v1/version", ""},
		{"wrong token", "/v1/version", "Bearer wrong-token-0123456789abcdef"},
		{"token's prefix", "/v1/version", "Bearer " + testToken[:len(testToken)-1]},
		{"token and more", "/v1/version", "Bearer " + testToken + "x"},
		{"basic scheme", "/v1/version", "Basic " + testToken},
		{"scheme alone", "/v1/version", "Bearer"},
		{"metrics", "/metrics", ""},
		{"unknown path", "/nope", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="sluiced"` {
				t.Fatalf("status %d, WWW-Authenticate %q: %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
			var e hostapi.Error
			if err := json.Unmarshal(body, &e); err != nil || e.Code != hostapi.CodeUnauthorized {
				t.Fatalf("body %s: %v", body, err)
			}
			if strings.Contains(string(body), "token-0123") || strings.Contains(string(body), testToken) {
				t.Fatalf("the 401 echoes a token: %s", body)
			}
		})
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("the service was called: %v", calls)
	}
}

// TestClientOverTCP: the hostapi client with the token works over TCP,
// /metrics too; with a wrong token it gets an error naming the refusal.
func TestClientOverTCP(t *testing.T) {
	f := newFake()
	addr := serveTCP(t, TCPConfig{}, Handler(f))
	ctx := guard(t)
	c := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: testToken})
	if v, err := c.Version(ctx); err != nil || v != f.version {
		t.Fatalf("Version = %+v, %v", v, err)
	}
	if _, err := c.CreateVM(ctx, hostapi.CreateVMRequest{Name: "web", Weight: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetVM(ctx, "nope"); !errors.Is(err, hostapi.ErrNotFound) {
		t.Fatalf("GetVM(nope) = %v, want not found", err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "bearer "+testToken) // the scheme is case-insensitive
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics with the token: %d", resp.StatusCode)
	}
	bad := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: "another-token-0123456789"})
	if _, err = bad.Version(ctx); !unauthorized(err) {
		t.Fatalf("a wrong token: %v", err)
	}
	var names []string
	for _, c := range f.Calls() {
		names = append(names, strings.Fields(c)[0])
	}
	if got := strings.Join(names, ","); got != "Version,CreateVM,GetVM,Stats" {
		t.Fatalf("calls %q", f.Calls())
	}
}

// unauthorized says whether err is the daemon's 401.
func unauthorized(err error) bool {
	var re *hostapi.RemoteError
	return errors.As(err, &re) && re.Status == http.StatusUnauthorized && re.Code == hostapi.CodeUnauthorized
}

// TestTokenFileChecks: the token file's refusals, none of which prints
// the file's content.
func TestTokenFileChecks(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"world-readable", testToken, 0o604, "every user may read"},
		{"world-writable", testToken, 0o602, "every user may read or change"},
		{"too short", "short-secret", 0o600, "want at least 16"},
		{"empty", "\n", 0o600, "want at least 16"},
		{"two words", "first-half-secret second-half-secret", 0o600, "more than one word"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ListenTCP(TCPConfig{Addr: "127.0.0.1:0", TokenFile: tokenFile(t, tc.content, tc.mode)}, Handler(newFake()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			for _, w := range strings.Fields(tc.content) {
				if strings.Contains(err.Error(), w) {
					t.Fatalf("the error prints the token: %v", err)
				}
			}
		})
	}
	if _, err := ListenTCP(TCPConfig{Addr: "127.0.0.1:0", TokenFile: filepath.Join(t.TempDir(), "none")}, Handler(newFake())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
	if _, err := ListenTCP(TCPConfig{Addr: "127.0.0.1:0", TokenFile: t.TempDir()}, Handler(newFake())); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory: %v", err)
	}
}

// TestServerKeepsNoToken: the server holds the token's hash, not the
// token, so no print of it (a %+v in a log line) can show it.
func TestServerKeepsNoToken(t *testing.T) {
	srv, err := ListenTCP(TCPConfig{Addr: "127.0.0.1:0", TokenFile: tokenFile(t, testToken, 0o600)}, Handler(newFake()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	for _, s := range []string{fmt.Sprintf("%+v", srv), fmt.Sprintf("%#v", srv.http.Handler), fmt.Sprintf("%+v", srv.http)} {
		if strings.Contains(s, testToken) || strings.Contains(s, fmt.Sprintf("%x", testToken)) {
			t.Fatalf("the token shows in %s", s)
		}
	}
}

func TestTCPConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c    TCPConfig
		want string // "" valid
	}{
		{TCPConfig{}, ""},
		{TCPConfig{Addr: ":7443", TokenFile: "t"}, ""},
		{TCPConfig{Addr: ":7443", TokenFile: "t", CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, ""},
		{TCPConfig{TokenFile: "t"}, "without an address"},
		{TCPConfig{Addr: "7443", TokenFile: "t"}, "want host:port"},
		{TCPConfig{Addr: ":7443"}, "a token file is required"},
		{TCPConfig{Addr: ":7443", TokenFile: "t", CertFile: "c"}, "both a certificate and a key"},
		{TCPConfig{Addr: ":7443", TokenFile: "t", ClientCAFile: "ca"}, "need TLS"},
	} {
		err := tc.c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestTCPOverTLS: TLS with the server's CA; a client that does not trust
// it fails the handshake; with mutual TLS a client without a certificate
// is refused and one with the CA's works.
func TestTCPOverTLS(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.issue(t, dir, "server", true)
	cliCert, cliKey := ca.issue(t, dir, "client", false)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := guard(t)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)

	addr := serveTCP(t, TCPConfig{CertFile: certFile, KeyFile: keyFile}, Handler(newFake()))
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: testToken, TLS: &tls.Config{RootCAs: roots}}).Version(ctx); err != nil {
		t.Fatalf("TLS: %v", err)
	}
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: testToken, TLS: &tls.Config{}}).Version(ctx); err == nil {
		t.Fatal("a client that does not trust the CA got through")
	}
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: testToken}).Version(ctx); err == nil {
		t.Fatal("plain HTTP to a TLS listener got through")
	}

	mtls := serveTCP(t, TCPConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}, Handler(newFake()))
	if _, err := hostapi.NewTCPClient(mtls, hostapi.TCPOptions{Token: testToken, TLS: &tls.Config{RootCAs: roots}}).Version(ctx); err == nil {
		t.Fatal("mutual TLS: a client without a certificate got through")
	}
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}
	if _, err := hostapi.NewTCPClient(mtls, hostapi.TCPOptions{Token: testToken, TLS: withCert}).Version(ctx); err != nil {
		t.Fatalf("mutual TLS with the client's certificate: %v", err)
	}
	if _, err := hostapi.NewTCPClient(mtls, hostapi.TCPOptions{Token: "wrong-token-0123456789abc", TLS: withCert}).Version(ctx); !unauthorized(err) {
		t.Fatalf("mutual TLS does not replace the token: %v", err)
	}
}

// testCA is a throwaway certificate authority for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate the CA signs, for 127.0.0.1 (a server) or a
// client, and its key, into dir.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestReloadToken: after a reload the new token works and the old one is
// refused; a new file that fails the checks is an error and the token in
// force stays. The socket's server has no token to reload.
func TestReloadToken(t *testing.T) {
	file := tokenFile(t, testToken, 0o600)
	srv, err := ListenTCP(TCPConfig{Addr: "127.0.0.1:0", TokenFile: file}, Handler(newFake()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	ctx := guard(t)
	addr := srv.Addr().String()
	const next = "next-token-0123456789abcdef"
	if err := os.WriteFile(file, []byte(next+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: testToken}).Version(ctx); err != nil {
		t.Fatalf("before the reload, the old token: %v", err)
	}
	if err := srv.ReloadToken(); err != nil {
		t.Fatal(err)
	}
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: next}).Version(ctx); err != nil {
		t.Fatalf("the new token: %v", err)
	}
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: testToken}).Version(ctx); !unauthorized(err) {
		t.Fatalf("the old token after the reload: %v", err)
	}
	if err := os.WriteFile(file, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadToken(); err == nil || strings.Contains(err.Error(), "short") {
		t.Fatalf("a short token: %v", err)
	}
	if _, err := hostapi.NewTCPClient(addr, hostapi.TCPOptions{Token: next}).Version(ctx); err != nil {
		t.Fatalf("a failed reload dropped the token: %v", err)
	}
	unix, _, _ := serve(t, Handler(newFake()), 0o600)
	if err := unix.ReloadToken(); err == nil {
		t.Fatal("the socket's server reloaded a token")
	}
}
