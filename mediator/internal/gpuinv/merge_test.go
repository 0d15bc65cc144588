package gpuinv

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

const h100 = "NVIDIA H100 80GB HBM3"

// served is the PCI address each declared GPU got ("" for none).
func served(m Merged) []string {
	out := make([]string, len(m.Served))
	for i, s := range m.Served {
		if s.PCI != nil {
			out[i] = s.PCI.Address
		}
	}
	return out
}

func unused(m Merged) []string {
	var out []string
	for _, g := range m.Unused {
		out = append(out, g.Address)
	}
	return out
}

// TestMergeRecordedTrees merges declared GPUs with the trees recorded on
// real machines (the H100 host, the build machine) and the SR-IOV ones.
func TestMergeRecordedTrees(t *testing.T) {
	for _, tc := range []struct {
		name, tree string
		declared   []Declared
		served     []string // PCI address per declared GPU, "" for none
		unused     []string
	}{
		{"cuda names the H100", "h100-host.tar", []Declared{{Model: h100, MemoryBytes: 80 << 30}}, []string{"0000:00:06.0"}, nil},
		{"cuda's bus id, NVML form", "h100-host.tar", []Declared{{Model: "H100", PCIAddress: "00000000:00:06.0"}}, []string{"0000:00:06.0"}, nil},
		{"the address without a domain, upper case", "h100-host.tar", []Declared{{PCIAddress: "00:06.0"}}, []string{"0000:00:06.0"}, nil},
		{"sim on the H100 host", "h100-host.tar", []Declared{{Model: "sim"}}, []string{""}, []string{"0000:00:06.0"}},
		{"another model", "h100-host.tar", []Declared{{Model: "NVIDIA A100-SXM4-80GB"}}, []string{""}, []string{"0000:00:06.0"}},
		{"nothing declared", "h100-host.tar", nil, []string{}, []string{"0000:00:06.0"}},
		{"sim on the build machine", "build-vm.tar", []Declared{{Model: "sim"}}, []string{""}, nil},
		{"the A100 PF, the AMD left", "synthetic-sriov.tar", []Declared{{Model: "NVIDIA A100-SXM4-80GB"}}, []string{"0000:41:00.0"}, []string{"0000:c1:00.0"}},
		{"both, by address", "synthetic-sriov.tar", []Declared{{PCIAddress: "0000:C1:00.0"}, {PCIAddress: "41:00.0"}}, []string{"0000:c1:00.0", "0000:41:00.0"}, nil},
		{"a sim and the A100 by name", "synthetic-sriov.tar", []Declared{{Model: "sim"}, {Model: "NVIDIA A100-SXM4-80GB"}}, []string{"", "0000:41:00.0"}, []string{"0000:c1:00.0"}},
		{"16 VFs: the PF", "tarook-sriov.tar", []Declared{{PCIAddress: "0000:82:00.0"}}, []string{"0000:82:00.0"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found, err := Discover(extract(t, tc.tree))
			if err != nil {
				t.Fatal(err)
			}
			m, err := Merge(tc.declared, found)
			if err != nil {
				t.Fatal(err)
			}
			if got := served(m); strings.Join(got, ",") != strings.Join(tc.served, ",") {
				t.Errorf("served %q, want %q", got, tc.served)
			}
			if got := unused(m); strings.Join(got, ",") != strings.Join(tc.unused, ",") {
				t.Errorf("unused %q, want %q", got, tc.unused)
			}
			for i, s := range m.Served {
				if s.Declared != tc.declared[i] {
					t.Errorf("served %d: %+v, want the declaration %+v", i, s.Declared, tc.declared[i])
				}
			}
		})
	}
}

func TestMergeRefusals(t *testing.T) {
	found, err := Discover(extract(t, "h100-host.tar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		declared []Declared
		want     string
	}{
		{"no GPU there", []Declared{{PCIAddress: "0000:41:00.0"}}, "0000:41:00.0: no such GPU"},
		{"a function that is not a GPU", []Declared{{PCIAddress: "0000:00:00.0"}}, "no such GPU"},
		{"declared twice", []Declared{{PCIAddress: "0000:00:06.0"}, {PCIAddress: "00:06.0"}}, "declared twice"},
		{"not an address", []Declared{{PCIAddress: "gpu0"}}, "want [DOMAIN:]BUS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge(tc.declared, found)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Merge([]Declared{{PCIAddress: "0000:41:00.0"}}, found); !errors.Is(err, ErrNotFound) {
		t.Fatalf("%v is not ErrNotFound", err)
	}
}

// TestMergeSameModel: two GPUs of the declared model and no address: which
// one the backend drives is unknown, so neither is claimed; a second
// declared GPU of the model claims nothing either.
func TestMergeSameModel(t *testing.T) {
	found := []GPU{{Address: "0000:41:00.0", Model: h100}, {Address: "0000:c1:00.0", Model: h100}}
	m, err := Merge([]Declared{{Model: h100}}, found)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(m); got[0] != "" || len(m.Unused) != 2 {
		t.Fatalf("served %q, unused %q", got, unused(m))
	}
	// One taken by address leaves one of the model for the other.
	m, err = Merge([]Declared{{Model: h100}, {Model: h100, PCIAddress: "0000:41:00.0"}}, found)
	if err != nil {
		t.Fatal(err)
	}
	if got := served(m); got[0] != "0000:c1:00.0" || got[1] != "0000:41:00.0" || len(m.Unused) != 0 {
		t.Fatalf("served %q, unused %q", got, unused(m))
	}
}

func TestNormalizeAddress(t *testing.T) {
	for in, want := range map[string]string{
		"0000:41:00.0":     "0000:41:00.0",
		"00000000:41:00.0": "0000:41:00.0",
		"0000:C1:1F.7":     "0000:c1:1f.7",
		"41:00.0":          "0000:41:00.0",
		"10000:00:02.0":    "10000:00:02.0",
		"0:0:0.0":          "0000:00:00.0",
	} {
		if got, err := NormalizeAddress(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "41", "41:00", "0000:41:00", "0000:100:00.0", "0000:41:20.0", "0000:41:00.8",
		"0000:41:00.0.0", "0000:0000:41:00.0", ":41:00.0", "0000:41:.0", "x:41:00.0", "0000:41:00.-1", "100000000:00:00.0", "+0:1:2.3"} {
		if got, err := NormalizeAddress(bad); err == nil {
			t.Errorf("%q: %q, want an error", bad, got)
		}
	}
}

var sysfsAddress = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$`)

// FuzzNormalizeAddress: what it accepts comes out in sysfs's form, and
// normalizing that again changes nothing.
func FuzzNormalizeAddress(f *testing.F) {
	for _, s := range []string{"0000:41:00.0", "00000000:41:00.0", "41:00.0", "0000:C1:1F.7", "10000:00:02.0", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeAddress(s)
		if err != nil {
			return
		}
		if !sysfsAddress.MatchString(got) {
			t.Fatalf("%q -> %q: not sysfs's form", s, got)
		}
		if again, err := NormalizeAddress(got); err != nil || again != got {
			t.Fatalf("%q -> %q -> %q, %v", s, got, again, err)
		}
	})
}
