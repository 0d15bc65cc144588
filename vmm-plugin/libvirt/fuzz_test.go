package libvirt

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseDomain feeds hostile XML to the parser and to the lookups the hook
// runs on its result: none may panic.
func FuzzParseDomain(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.xml"))
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(libvirtLiveXML))
	f.Add([]byte(`<domain><devices><shmem name="sluice"><model type="ivshmem-doorbell"/></shmem><serial type="file"/><console/></devices></domain>`))
	f.Add([]byte(`<domain><metadata><s:vm xmlns:s="` + Namespace + `" weight="1" cap="0.5" region-size="4096"/></metadata></domain>`))
	f.Add([]byte(`<domain><metadata><s:vm xmlns:s="` + Namespace + `"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDomain(data)
		if err != nil {
			return
		}
		if dev, ok := SluiceShmem(d); ok && (dev.Model == nil || dev.Model.Type != ShmemModel) {
			t.Fatalf("SluiceShmem returned a %+v", dev.Model)
		}
		_, _ = SluiceSettings(d)
		// Whatever parsed must render again.
		if _, err := Marshal(d); err != nil {
			t.Fatalf("Marshal of a parsed domain: %v", err)
		}
	})
}
