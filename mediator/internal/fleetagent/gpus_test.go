package fleetagent

import "testing"

func TestParseGPUs(t *testing.T) {
	g, err := ParseGPUs("H100:80GiB, A10:24576MiB,sim:1024")
	if err != nil {
		t.Fatal(err)
	}
	if len(g) != 3 || g[0].Model != "H100" || g[0].MemoryBytes != 80<<30 || g[1].Index != 1 || g[1].MemoryBytes != 24<<30 || g[2].MemoryBytes != 1024 {
		t.Fatalf("%+v", g)
	}
	for _, bad := range []string{"", "H100", ":1GiB", "H100:0", "H100:-1GiB", "H100:lots", "H100:99999999999TiB", "a:1GiB,"} {
		if _, err := ParseGPUs(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
