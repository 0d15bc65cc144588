package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHasMountTag(t *testing.T) {
	devices := t.TempDir()
	if hasMountTag(devices, volumeTag) {
		t.Error("tag found without devices")
	}
	for name, tag := range map[string]string{"virtio0": "", "virtio1": "other\x00", "virtio2": volumeTag + "\x00"} {
		dir := filepath.Join(devices, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if tag == "" {
			continue // a virtio device that is no 9p transport has no mount_tag
		}
		if err := os.WriteFile(filepath.Join(dir, "mount_tag"), []byte(tag), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if !hasMountTag(devices, volumeTag) {
		t.Error("tag not found")
	}
	if hasMountTag(devices, "sluice") {
		t.Error("a prefix of a tag matched")
	}
}
