package daemon

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
)

// TestConfigHostTCP: Validate checks the TCP host API's settings with the
// rest, so a token file without an address or an address without a token
// file stops sluiced at start.
func TestConfigHostTCP(t *testing.T) {
	for _, tc := range []struct {
		tcp  apiserver.TCPConfig
		want string // "" valid
	}{
		{apiserver.TCPConfig{}, ""},
		{apiserver.TCPConfig{Addr: "127.0.0.1:7443", TokenFile: "/etc/sluice/token"}, ""},
		{apiserver.TCPConfig{Addr: "127.0.0.1:7443"}, "a token file is required"},
		{apiserver.TCPConfig{TokenFile: "/etc/sluice/token"}, "without an address"},
		{apiserver.TCPConfig{Addr: "127.0.0.1:7443", TokenFile: "t", KeyFile: "k"}, "both a certificate and a key"},
	} {
		cfg := DefaultConfig()
		cfg.Socket = filepath.Join(t.TempDir(), "s.sock")
		cfg.Proxy.Binary = "off"
		cfg.HostTCP = tc.tcp
		err := cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.tcp, err, tc.want)
		}
	}
}
