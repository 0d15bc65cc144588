package libvirt

import "encoding/xml"

// Character devices: as in libvirtxml, the source is a union whose variant
// sets the device's type attribute (<serial type='file'>). Only the variants
// Sluice writes are modelled; a device of another type parses with a nil
// Source.

// DomainSerial is a <serial> device.
type DomainSerial struct {
	XMLName xml.Name             `xml:"serial"`
	Source  *DomainChardevSource `xml:"source"`
	Target  *DomainSerialTarget  `xml:"target"`
}

// DomainConsole is a <console> device.
type DomainConsole struct {
	XMLName xml.Name             `xml:"console"`
	Source  *DomainChardevSource `xml:"source"`
	Target  *DomainConsoleTarget `xml:"target"`
}

// DomainChardevSource is the backend of a character device: set one field.
type DomainChardevSource struct {
	Pty  *DomainChardevSourcePty
	File *DomainChardevSourceFile
}

// DomainChardevSourcePty is type='pty': libvirt allocates the pty and fills
// in Path in the live XML.
type DomainChardevSourcePty struct {
	Path string
}

// DomainChardevSourceFile is type='file': the guest's output goes to Path.
type DomainChardevSourceFile struct {
	Path   string
	Append string // on or off
}

// DomainSerialTarget is <target port='0'/>.
type DomainSerialTarget struct {
	Type string `xml:"type,attr,omitempty"`
	Port *uint  `xml:"port,attr"`
}

// DomainConsoleTarget is <target type='serial' port='0'/>.
type DomainConsoleTarget struct {
	Type string `xml:"type,attr,omitempty"`
	Port *uint  `xml:"port,attr"`
}

// chardevXML is the wire form shared by <serial> and <console>.
type chardevXML struct {
	Type   string            `xml:"type,attr,omitempty"`
	Source *chardevSourceXML `xml:"source"`
	Target *chardevTargetXML `xml:"target"`
}

type chardevSourceXML struct {
	Path   string `xml:"path,attr,omitempty"`
	Append string `xml:"append,attr,omitempty"`
}

type chardevTargetXML struct {
	Type string `xml:"type,attr,omitempty"`
	Port *uint  `xml:"port,attr"`
}

func (s *DomainChardevSource) toXML() (string, *chardevSourceXML) {
	switch {
	case s == nil:
		return "", nil
	case s.File != nil:
		return "file", &chardevSourceXML{Path: s.File.Path, Append: s.File.Append}
	case s.Pty != nil:
		if s.Pty.Path == "" {
			return "pty", nil
		}
		return "pty", &chardevSourceXML{Path: s.Pty.Path}
	}
	return "", nil
}

func chardevSourceFromXML(c chardevXML) *DomainChardevSource {
	var src chardevSourceXML
	if c.Source != nil {
		src = *c.Source
	}
	switch c.Type {
	case "file":
		return &DomainChardevSource{File: &DomainChardevSourceFile{Path: src.Path, Append: src.Append}}
	case "pty":
		return &DomainChardevSource{Pty: &DomainChardevSourcePty{Path: src.Path}}
	}
	return nil
}

// MarshalXML writes the source's variant as the type attribute.
func (s DomainSerial) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	c := chardevXML{}
	c.Type, c.Source = s.Source.toXML()
	if s.Target != nil {
		c.Target = &chardevTargetXML{Type: s.Target.Type, Port: s.Target.Port}
	}
	start.Name = xml.Name{Local: "serial"}
	return e.EncodeElement(c, start)
}

// UnmarshalXML reads the type attribute into the source's variant.
func (s *DomainSerial) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	var c chardevXML
	if err := d.DecodeElement(&c, &start); err != nil {
		return err
	}
	*s = DomainSerial{Source: chardevSourceFromXML(c)}
	if c.Target != nil {
		s.Target = &DomainSerialTarget{Type: c.Target.Type, Port: c.Target.Port}
	}
	return nil
}

// MarshalXML writes the source's variant as the type attribute.
func (s DomainConsole) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	c := chardevXML{}
	c.Type, c.Source = s.Source.toXML()
	if s.Target != nil {
		c.Target = &chardevTargetXML{Type: s.Target.Type, Port: s.Target.Port}
	}
	start.Name = xml.Name{Local: "console"}
	return e.EncodeElement(c, start)
}

// UnmarshalXML reads the type attribute into the source's variant.
func (s *DomainConsole) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	var c chardevXML
	if err := d.DecodeElement(&c, &start); err != nil {
		return err
	}
	*s = DomainConsole{Source: chardevSourceFromXML(c)}
	if c.Target != nil {
		s.Target = &DomainConsoleTarget{Type: c.Target.Type, Port: c.Target.Port}
	}
	return nil
}
