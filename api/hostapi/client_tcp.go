package hostapi

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// TCPOptions say how a client reaches a daemon's TCP host API.
type TCPOptions struct {
	// Token is the bearer token sent with every request.
	Token string
	// TLS, when not nil, is the connection's TLS configuration (its
	// RootCAs, and Certificates for mutual TLS); ServerName defaults to
	// the address's host. nil: plain HTTP.
	TLS *tls.Config
}

// NewTCPClient returns a client for the daemon's host API on a TCP address
// (host:port).
func NewTCPClient(addr string, o TCPOptions) *Client {
	scheme := "tcp://"
	var tcfg *tls.Config
	if o.TLS != nil {
		scheme, tcfg = "tls://", o.TLS.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil && tcfg.ServerName == "" {
			tcfg.ServerName = host
		}
	}
	tr := &http.Transport{
		// The requests' URLs say http://sluiced whatever the transport, as
		// on the socket: the dialer decides where and how they go.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil || tcfg == nil {
				return c, err
			}
			tc := tls.Client(c, tcfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, &net.OpError{Op: "tls handshake", Net: "tcp", Addr: c.RemoteAddr(), Err: err}
			}
			return tc, nil
		},
		MaxIdleConns: 4,
	}
	rt := bearerTransport{token: o.Token, next: tr}
	return &Client{socket: scheme + addr, hc: &http.Client{Transport: rt, Timeout: 30 * time.Second}}
}

// bearerTransport adds the token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
