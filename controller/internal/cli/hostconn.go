package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/internal/limitread"
)

// HostTokenFileEnv names the environment variable that sets
// --host-token-file.
const HostTokenFileEnv = "SLUICE_HOST_TOKEN_FILE"

// Schemes of --socket for sluiced's TCP host API.
const (
	schemeTCP = "tcp://"
	schemeTLS = "tls://"
)

// hostConn is how sluicectl reaches sluiced over TCP: --socket tcp://ADDR
// or tls://ADDR, with a token file and, for TLS, CA and client files.
type hostConn struct {
	tokenFile, ca, cert, key string
	client                   *hostapi.Client // set by resolveHost for a TCP --socket
}

// addHostFlags adds the TCP host API's persistent flags.
func (a *app) addHostFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&a.host.tokenFile, "host-token-file", "",
		"with --socket tcp://HOST:PORT or tls://HOST:PORT: the file holding sluiced's host API token (env "+HostTokenFileEnv+")")
	f.StringVar(&a.host.ca, "host-ca", "", "with --socket tls://...: PEM file of the CA that signed sluiced's certificate (default: the system's CAs)")
	f.StringVar(&a.host.cert, "host-cert", "", "with --socket tls://...: PEM client certificate, for a sluiced that wants one (with --host-key)")
	f.StringVar(&a.host.key, "host-key", "", "with --socket tls://...: PEM key of --host-cert")
}

// maxPEMFile bounds a token, CA or certificate file read.
const maxPEMFile = 1 << 20

// resolveHost builds the TCP client when --socket names a TCP address; a
// path leaves the UNIX socket's client to client().
func (a *app) resolveHost() error {
	h := &a.host
	if h.tokenFile == "" {
		h.tokenFile = a.opts.Getenv(HostTokenFileEnv)
	}
	addr, useTLS, isTCP := tcpAddress(a.socket)
	if !isTCP {
		if h.ca != "" || h.cert != "" || h.key != "" {
			return usageErrorf("--host-ca, --host-cert and --host-key are for --socket tls://HOST:PORT")
		}
		return nil
	}
	if addr == "" {
		return usageErrorf("--socket %q: want tcp://HOST:PORT or tls://HOST:PORT", a.socket)
	}
	if h.tokenFile == "" {
		return usageErrorf("--socket %s needs --host-token-file (or %s): sluiced serves nothing over TCP without its token", a.socket, HostTokenFileEnv)
	}
	tok, err := limitread.File(h.tokenFile, maxPEMFile)
	if err != nil {
		return fmt.Errorf("reading the host token file: %w", err)
	}
	tok = bytes.TrimSpace(tok)
	if len(tok) == 0 {
		return fmt.Errorf("the host token file %s is empty", h.tokenFile)
	}
	o := hostapi.TCPOptions{Token: string(tok)}
	if useTLS {
		if o.TLS, err = h.tlsConfig(); err != nil {
			return err
		}
	} else if h.ca != "" || h.cert != "" || h.key != "" {
		return usageErrorf("--host-ca, --host-cert and --host-key need --socket tls://%s", addr)
	}
	h.client = hostapi.NewTCPClient(addr, o)
	return nil
}

// tcpAddress splits a --socket value of the tcp:// or tls:// scheme.
func tcpAddress(socket string) (addr string, useTLS, ok bool) {
	if rest, found := strings.CutPrefix(socket, schemeTCP); found {
		return rest, false, true
	}
	if rest, found := strings.CutPrefix(socket, schemeTLS); found {
		return rest, true, true
	}
	return "", false, false
}

// tlsConfig is the client's TLS configuration from --host-ca,
// --host-cert and --host-key.
func (h *hostConn) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if h.ca != "" {
		pem, err := limitread.File(h.ca, maxPEMFile)
		if err != nil {
			return nil, fmt.Errorf("reading --host-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--host-ca %s holds no PEM certificate", h.ca)
		}
	}
	if (h.cert == "") != (h.key == "") {
		return nil, usageErrorf("--host-cert and --host-key go together")
	}
	if h.cert != "" {
		pair, err := tls.LoadX509KeyPair(h.cert, h.key)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
