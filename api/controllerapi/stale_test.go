package controllerapi

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the code from openapi.yaml with the
// pinned oapi-codegen (go tool) into a temporary file and fails when the
// checked-in controllerapi.gen.go differs: the spec changed and nobody ran
// go generate, or the generated file was edited by hand.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to run the pinned generator: %v", err)
	}
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.gen.go")
	const want = "output: controllerapi.gen.go"
	if !bytes.Contains(cfg, []byte(want)) {
		t.Fatalf("oapi-codegen.yaml has no %q line", want)
	}
	tmpCfg := filepath.Join(t.TempDir(), "oapi-codegen.yaml")
	if err := os.WriteFile(tmpCfg, bytes.Replace(cfg, []byte(want), []byte("output: "+out), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "tool", "oapi-codegen", "-config", tmpCfg, "openapi.yaml")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool oapi-codegen: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("controllerapi.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, have) {
		gl, hl := strings.Split(string(got), "\n"), strings.Split(string(have), "\n")
		for i := 0; i < min(len(gl), len(hl)); i++ {
			if gl[i] != hl[i] {
				t.Fatalf("controllerapi.gen.go is stale (run go generate ./api/controllerapi): line %d is\n  %s\nwant\n  %s", i+1, hl[i], gl[i])
			}
		}
		t.Fatalf("controllerapi.gen.go is stale (run go generate ./api/controllerapi): %d lines, want %d", len(hl), len(gl))
	}
}
