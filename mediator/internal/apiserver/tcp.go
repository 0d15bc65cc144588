package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/sluice-gpu/sluice/internal/limitread"
)

// TCPConfig is the host API on a TCP address, for a controller or an
// operator on another machine. There is no peer credential to check over
// TCP, so every request, /metrics included, must carry the bearer token of
// TokenFile (a Prometheus server scrapes with bearer_token_file, or from
// sluiced --metrics-listen, which serves /metrics alone without one).
type TCPConfig struct {
	// Addr is the address to listen on (host:port). Default "": no TCP
	// listener, the UNIX socket alone.
	Addr string
	// TokenFile holds the bearer token (one line of at least
	// MinTokenLength bytes; surrounding white space is dropped). Required
	// with Addr. It must not be readable or writable by every user. It is
	// read at start and again on Server.ReloadToken. Default "".
	TokenFile string
	// CertFile and KeyFile are the server's TLS certificate and key (PEM),
	// both or neither. Default none: plain HTTP, so the token crosses the
	// network in clear; use it on a trusted network only.
	CertFile, KeyFile string
	// ClientCAFile, with TLS, makes clients present a certificate signed by
	// one of its CAs (mutual TLS), on top of the token. Default "": none.
	ClientCAFile string
}

// MinTokenLength is the shortest token a token file may hold: 16 bytes
// is 128 bits only if random, so pick 32 hex digits or more (openssl rand
// -hex 32).
const MinTokenLength = 16

// maxTokenFile bounds the token file read (a line).
const maxTokenFile = 4096

// Validate checks the settings that do not need the files.
func (c TCPConfig) Validate() error {
	if c.Addr == "" {
		if c.TokenFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ClientCAFile != "" {
			return errors.New("tcp host api: a token file or TLS files without an address to listen on")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("tcp host api: address %q: want host:port: %w", c.Addr, err)
	}
	if c.TokenFile == "" {
		return errors.New("tcp host api: a token file is required (nothing is served over TCP without a token)")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("tcp host api: TLS needs both a certificate and a key file")
	}
	if c.ClientCAFile != "" && c.CertFile == "" {
		return errors.New("tcp host api: client certificates (a client CA file) need TLS (a certificate and a key file)")
	}
	return nil
}

// ListenTCP listens on c.Addr and serves h there to requests that carry the
// token: the others get 401 and nothing else.
func ListenTCP(c TCPConfig, h http.Handler) (*Server, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tok, err := newTokenGate(c.TokenFile)
	if err != nil {
		return nil, err
	}
	var tcfg *tls.Config
	if c.CertFile != "" {
		if tcfg, err = serverTLS(c); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", c.Addr, err)
	}
	if tcfg != nil {
		ln = tls.NewListener(ln, tcfg)
	}
	return &Server{ln: ln, token: tok, http: &http.Server{
		Handler:           requireToken(tok, h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}}, nil
}

// ReloadToken reads the token file again (for sluiced on SIGHUP), so that
// a token is replaced without a restart: requests from then on need the new
// one. A file that fails the checks is an error and leaves the old token in
// force. The UNIX socket's server has no token.
func (s *Server) ReloadToken() error {
	if s.token == nil {
		return errors.New("the host api socket takes no token")
	}
	return s.token.reload()
}

// Addr is the address the server listens on (the port chosen for ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// readToken reads the token file, refusing one every user may read or
// change, and keeps only the token's hash.
func readToken(path string) (tokenHash, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return tokenHash{}, fmt.Errorf("tcp host api token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return tokenHash{}, fmt.Errorf("tcp host api token file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return tokenHash{}, fmt.Errorf("tcp host api token file %s: every user may read or change it (mode %04o; chmod o-rwx)", path, fi.Mode().Perm())
	}
	b, err := limitread.File(path, maxTokenFile)
	if err != nil {
		return tokenHash{}, fmt.Errorf("tcp host api token file: %w", err)
	}
	return newTokenHash(b)
}

// serverTLS is the listener's TLS configuration: the certificate, and the
// client CAs for mutual TLS.
func serverTLS(c TCPConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tcp host api: loading the TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile == "" {
		return cfg, nil
	}
	pem, err := limitread.File(c.ClientCAFile, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("tcp host api: reading the client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tcp host api: client CA file %s holds no PEM certificate", c.ClientCAFile)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	return cfg, nil
}
