package auth

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

func TestNewSecretIsFreshAndHashed(t *testing.T) {
	s1, id1, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	s2, id2, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if s1 == s2 || id1 == id2 {
		t.Fatalf("two secrets or ids are equal: %q %q, %q %q", s1, s2, id1, id2)
	}
	if !strings.HasPrefix(s1, SecretPrefix) || len(s1) != len(SecretPrefix)+43 {
		t.Fatalf("secret %q: want %s and 43 base64url characters", s1, SecretPrefix)
	}
	if bytes.Equal(Hash(s1), Hash(s2)) || !bytes.Equal(Hash(s1), Hash(s1)) || len(Hash(s1)) != 32 {
		t.Fatal("Hash is not a SHA-256 of the secret")
	}
	if bytes.Contains(Hash(s1), []byte(s1)) {
		t.Fatal("the hash contains the secret")
	}
}

func TestBearerSecret(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"Bearer  abc ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"", "", false},
	} {
		got, ok := BearerSecret(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("BearerSecret(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestPrincipalScopes(t *testing.T) {
	op := Principal{Role: fleet.RoleOperator}
	acme := Principal{Role: fleet.RoleTenant, Tenant: "acme"}
	h1 := Principal{Role: fleet.RoleHost, Host: "h1"}
	if !op.SeesTenant("acme") || !acme.SeesTenant("acme") || acme.SeesTenant("other") || h1.SeesTenant("acme") {
		t.Error("SeesTenant")
	}
	if !op.ActsForHost("h1") || !h1.ActsForHost("h1") || h1.ActsForHost("h2") || acme.ActsForHost("h1") {
		t.Error("ActsForHost")
	}
	// A tenant token with an empty tenant sees nobody's VMs, not everyone's.
	if (Principal{Role: fleet.RoleTenant}).SeesTenant("") {
		t.Error("a tenant principal without a tenant sees the empty tenant")
	}
	ctx := With(context.Background(), acme)
	if p, ok := From(ctx); !ok || p != acme {
		t.Error("From(With(p)) != p")
	}
	if _, ok := From(context.Background()); ok {
		t.Error("From of a bare context has a principal")
	}
}
