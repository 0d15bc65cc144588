// Package auth makes and checks the controller's bearer tokens: a secret is
// 32 random bytes, base64url-encoded behind the prefix "slc_"; the store
// keeps only its SHA-256 (a token of that much entropy needs no slow hash).
// A Principal is who a request's token says the caller is, carried in the
// request's context.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// SecretPrefix starts every secret the controller makes, so that one found
// in a log or a repository is recognisable.
const SecretPrefix = "slc_"

// NewSecret returns a fresh secret and its token ID.
func NewSecret() (secret, id string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("reading random bytes: %w", err)
	}
	var i [6]byte
	if _, err := rand.Read(i[:]); err != nil {
		return "", "", fmt.Errorf("reading random bytes: %w", err)
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), hex.EncodeToString(i[:]), nil
}

// NewID returns a fresh token ID (for a token whose secret was given).
func NewID() (string, error) {
	var i [6]byte
	if _, err := rand.Read(i[:]); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(i[:]), nil
}

// Hash is what the store keeps of a secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// BearerSecret extracts the secret of an Authorization header value; ok is
// false when there is none.
func BearerSecret(header string) (string, bool) {
	scheme, secret, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret = strings.TrimSpace(secret)
	return secret, secret != ""
}

// Principal is the caller a token stands for.
type Principal struct {
	TokenID string
	Name    string
	Role    fleet.Role
	Tenant  string
	Host    string
}

// FromToken is the principal of a stored token.
func FromToken(t fleet.Token) Principal {
	return Principal{TokenID: t.ID, Name: t.Name, Role: t.Role, Tenant: t.Tenant, Host: t.Host}
}

// Actor names the principal in the audit log: "name (token id)".
func (p Principal) Actor() string { return fmt.Sprintf("%s (token %s)", p.Name, p.TokenID) }

// IsOperator reports whether p may do everything.
func (p Principal) IsOperator() bool { return p.Role == fleet.RoleOperator }

// SeesTenant reports whether p may see and change tenant's VMs and usage.
func (p Principal) SeesTenant(tenant string) bool {
	return p.Role == fleet.RoleOperator || (p.Role == fleet.RoleTenant && p.Tenant != "" && p.Tenant == tenant)
}

// ActsForHost reports whether p may register host, heartbeat for it and
// push its usage.
func (p Principal) ActsForHost(host string) bool {
	return p.Role == fleet.RoleOperator || (p.Role == fleet.RoleHost && p.Host != "" && p.Host == host)
}

type ctxKey struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// From returns the principal in ctx; ok is false when there is none.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}
