package libvirt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Names that mark Sluice's parts of a domain.
const (
	// ShmemName is the name of the Sluice <shmem> device. A domain has one
	// Sluice device; SluiceShmem also accepts names that start with it.
	ShmemName = "sluice"
	// ShmemModel is the shmem model Sluice needs: a doorbell server.
	ShmemModel = "ivshmem-doorbell"
	// Namespace is the XML namespace of the Sluice element in <metadata>.
	Namespace = "https://sluice-gpu.dev/xmlns/libvirt/1"
	// NamespacePrefix is the prefix Sluice writes for Namespace; readers go
	// by the namespace, not the prefix.
	NamespacePrefix = "sluice"
	// metadataElement is the local name of <sluice:vm>.
	metadataElement = "vm"
)

// ErrInvalid marks domain XML or Sluice settings that cannot be used.
var ErrInvalid = errors.New("invalid")

// Settings are a VM's Sluice settings as a domain carries them in
// <metadata><sluice:vm weight='2' .../></metadata>, so that the hook can
// create the VM in sluiced when the domain starts. Zero fields are absent
// and take sluiced's defaults.
type Settings struct {
	Weight      uint32  // attribute weight: share relative to other VMs, >= 1
	Cap         float64 // attribute cap: hard maximum share, (0, 1]
	Channels    int     // attribute channels: command channels, >= 1
	RingEntries int     // attribute ring-entries: entries per channel ring, >= 1
	RegionSize  uint64  // attribute region-size: shared memory in bytes, a power of two
}

// IsZero reports whether s sets nothing.
func (s Settings) IsZero() bool { return s == Settings{} }

// attrs returns the settings as attributes in a fixed order; zero fields are
// left out.
func (s Settings) attrs() []xml.Attr {
	var as []xml.Attr
	add := func(name, value string) { as = append(as, xml.Attr{Name: xml.Name{Local: name}, Value: value}) }
	if s.Weight != 0 {
		add("weight", strconv.FormatUint(uint64(s.Weight), 10))
	}
	if s.Cap != 0 {
		add("cap", strconv.FormatFloat(s.Cap, 'g', -1, 64))
	}
	if s.Channels != 0 {
		add("channels", strconv.Itoa(s.Channels))
	}
	if s.RingEntries != 0 {
		add("ring-entries", strconv.Itoa(s.RingEntries))
	}
	if s.RegionSize != 0 {
		add("region-size", strconv.FormatUint(s.RegionSize, 10))
	}
	return as
}

// SluiceMetadata builds the <metadata> that carries s. The prefix is written
// out by hand because encoding/xml cannot emit a prefixed element.
func SluiceMetadata(s Settings) *DomainMetadata {
	var b strings.Builder
	fmt.Fprintf(&b, "<%s:%s xmlns:%s=%q", NamespacePrefix, metadataElement, NamespacePrefix, Namespace)
	for _, a := range s.attrs() {
		b.WriteString(" " + a.Name.Local + `="`)
		_ = xml.EscapeText(&b, []byte(a.Value)) // strings.Builder does not fail
		b.WriteString(`"`)
	}
	b.WriteString("/>")
	return &DomainMetadata{XML: b.String()}
}

// SluiceSettings reads the Sluice settings from d's metadata. A domain
// without them gets zero Settings and no error; a malformed value is an
// ErrInvalid error naming the attribute.
func SluiceSettings(d Domain) (Settings, error) {
	if d.Metadata == nil {
		return Settings{}, nil
	}
	start, ok, err := findMetadataElement(d.Metadata.XML)
	if err != nil || !ok {
		return Settings{}, err
	}
	var s Settings
	for _, a := range start.Attr {
		if a.Name.Space != "" { // an attribute in another namespace is not ours
			continue
		}
		if err := s.set(a.Name.Local, strings.TrimSpace(a.Value)); err != nil {
			return Settings{}, fmt.Errorf("metadata %s:%s: %w", NamespacePrefix, metadataElement, err)
		}
	}
	return s, nil
}

// findMetadataElement returns the first top-level <vm> element in Namespace.
func findMetadataElement(inner string) (xml.StartElement, bool, error) {
	dec := xml.NewDecoder(strings.NewReader(inner))
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return xml.StartElement{}, false, nil
		}
		if err != nil {
			return xml.StartElement{}, false, fmt.Errorf("parsing domain metadata: %w: %w", ErrInvalid, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth == 0 && t.Name.Space == Namespace && t.Name.Local == metadataElement {
				return t, true, nil
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
}

func (s *Settings) set(name, value string) error {
	bad := func(want string) error {
		return fmt.Errorf("%s %q: want %s: %w", name, value, want, ErrInvalid)
	}
	switch name {
	case "weight":
		v, err := strconv.ParseUint(value, 10, 32)
		if err != nil || v == 0 {
			return bad("an integer from 1 to 4294967295")
		}
		s.Weight = uint32(v)
	case "cap":
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(v) || v <= 0 || v > 1 {
			return bad("a share in (0, 1]")
		}
		s.Cap = v
	case "channels", "ring-entries":
		v, err := strconv.ParseInt(value, 10, 32)
		if err != nil || v <= 0 {
			return bad("a positive integer")
		}
		if name == "channels" {
			s.Channels = int(v)
		} else {
			s.RingEntries = int(v)
		}
	case "region-size":
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil || v == 0 || v&(v-1) != 0 {
			return bad("a power of two in bytes")
		}
		s.RegionSize = v
	}
	// Unknown attributes are ignored: a newer sluicectl may write more.
	return nil
}

// SluiceShmem finds the Sluice device of d: a <shmem> of model
// ivshmem-doorbell named "sluice" (or a name starting with it). ok is false
// for a domain that does not use Sluice.
func SluiceShmem(d Domain) (shmem DomainShmem, ok bool) {
	if d.Devices == nil {
		return DomainShmem{}, false
	}
	for _, s := range d.Devices.Shmems {
		if s.Model != nil && s.Model.Type == ShmemModel && strings.HasPrefix(s.Name, ShmemName) {
			return s, true
		}
	}
	return DomainShmem{}, false
}
