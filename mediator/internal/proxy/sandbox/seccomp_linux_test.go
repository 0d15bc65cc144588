package sandbox

import (
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
)

// The allowlist and the kill list name real calls of this architecture
// (those missing are skipped there: only the generic ones may be) and never
// overlap; the policy assembles.
func TestPolicy(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	inAllowed := map[string]bool{}
	for _, n := range allowed {
		inAllowed[n] = true
	}
	for _, n := range killed {
		if inAllowed[n] {
			t.Errorf("%s is both allowed and killed", n)
		}
	}
	for _, n := range []string{"read", "write", "openat", "futex", "clone", "unshare", "setresuid", "sendmsg", "execve", "mount"} {
		if _, ok := info.SyscallNames[n]; !ok {
			t.Errorf("this architecture has no %s", n)
		}
	}
	p, err := Policy()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Assemble(); err != nil {
		t.Fatalf("assembling the policy: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default", DefaultConfig("/v"), true},
		{"no volume", DefaultConfig(""), false},
		{"few files", Config{Volume: "/v", MaxFiles: 2, Threads: 64}, false},
		{"few threads", Config{Volume: "/v", MaxFiles: 64, Threads: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
