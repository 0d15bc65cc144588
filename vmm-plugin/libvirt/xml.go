package libvirt

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
)

// MaxDomainXML bounds the domain XML Sluice reads. libvirt's own documents
// are far smaller; the bound keeps a runaway input from exhausting memory.
const MaxDomainXML = 16 << 20

// Marshal renders d as indented XML ending in a newline, ready for
// virsh define.
func Marshal(d Domain) ([]byte, error) {
	return marshalIndent(d, "domain")
}

// MarshalShmem renders one <shmem> device, to paste into <devices> of an
// existing domain.
func MarshalShmem(s DomainShmem) ([]byte, error) {
	return marshalIndent(s, "shmem")
}

func marshalIndent(v any, what string) ([]byte, error) {
	b, err := xml.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rendering %s xml: %w", what, err)
	}
	return append(b, '\n'), nil
}

// ParseDomain parses domain XML, keeping only the fields of the model.
// Errors read "parsing domain xml: ...".
func ParseDomain(data []byte) (Domain, error) {
	if len(data) > MaxDomainXML {
		return Domain{}, fmt.Errorf("parsing domain xml: %d bytes, more than the %d allowed", len(data), MaxDomainXML)
	}
	var d Domain
	dec := xml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		return Domain{}, fmt.Errorf("parsing domain xml: %w", err)
	}
	return d, nil
}

// ReadDomain reads at most MaxDomainXML bytes from r and parses them; a
// longer input is an error, not a truncated parse. It also returns the bytes
// read, even with an error.
func ReadDomain(r io.Reader) (Domain, []byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxDomainXML+1))
	if err != nil {
		return Domain{}, data, fmt.Errorf("reading domain xml: %w", err)
	}
	d, err := ParseDomain(data)
	return d, data, err
}
