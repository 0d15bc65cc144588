package hook

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// DefaultQEMUConf is libvirt's QEMU driver configuration, whose user=
// names the user QEMU runs as.
const DefaultQEMUConf = "/etc/libvirt/qemu.conf"

// defaultQEMUUsers are the users libvirt's QEMU driver runs as when
// qemu.conf sets none, as distributions build it: libvirt-qemu (Debian,
// Ubuntu), qemu (Fedora, RHEL, SUSE). With neither, libvirt's own default,
// root.
var defaultQEMUUsers = []string{"libvirt-qemu", "qemu"}

// qemuUID finds the user libvirt runs the domain's QEMU as: flagUser
// (--qemu-user) when set, else the user of the domain's static DAC
// <seclabel>, else user= in conf (qemu.conf), else the distributions'
// default. who says which, for messages.
func qemuUID(flagUser, conf string, domainXML []byte) (uid uint32, who string, err error) {
	name, who := flagUser, "--qemu-user"
	if name == "" {
		name, who = seclabelUser(domainXML), "the domain's <seclabel model='dac'>"
	}
	if name == "" {
		name, err = confUser(conf)
		if err != nil {
			return 0, "", err
		}
		who = "user= in " + conf
	}
	if name == "" {
		for _, u := range defaultQEMUUsers {
			if _, err := user.Lookup(u); err == nil {
				name, who = u, "libvirt's default"
				break
			}
		}
	}
	if name == "" {
		return 0, "libvirt's default (root)", nil
	}
	uid, err = lookupUID(name)
	if err != nil {
		return 0, "", fmt.Errorf("the user QEMU runs as (%s): %w", who, err)
	}
	return uid, fmt.Sprintf("%s (%s)", name, who), nil
}

// lookupUID resolves a user name, or +UID as libvirt writes a number.
func lookupUID(name string) (uint32, error) {
	if n, ok := strings.CutPrefix(name, "+"); ok {
		uid, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("user %q: %w", name, err)
		}
		return uint32(uid), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	return uint32(uid), nil
}

// seclabelUser is the user of a static DAC label of the domain
// (<seclabel type='static' model='dac'><label>USER:GROUP</label>), "" if
// it has none.
func seclabelUser(domainXML []byte) string {
	var d struct {
		SecLabels []struct {
			Type  string `xml:"type,attr"`
			Model string `xml:"model,attr"`
			Label string `xml:"label"`
		} `xml:"seclabel"`
	}
	if xml.Unmarshal(domainXML, &d) != nil {
		return ""
	}
	for _, l := range d.SecLabels {
		if l.Model == "dac" && l.Type == "static" && l.Label != "" {
			u, _, _ := strings.Cut(strings.TrimSpace(l.Label), ":")
			return u
		}
	}
	return ""
}

// confUser reads user = "NAME" from libvirt's qemu.conf (the last setting
// wins); "" when the file or the setting is missing.
func confUser(conf string) (string, error) {
	data, err := os.ReadFile(conf)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading libvirt's QEMU configuration: %w", err)
	}
	var name string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") || strings.TrimSpace(key) != "user" {
			continue
		}
		val = strings.TrimSpace(val)
		if i := strings.Index(val, "#"); i >= 0 && !strings.HasPrefix(val, `"`) {
			val = strings.TrimSpace(val[:i])
		}
		if len(val) >= 2 && val[0] == '"' {
			if end := strings.IndexByte(val[1:], '"'); end >= 0 {
				val = val[1 : 1+end]
			}
		}
		name = val
	}
	return name, sc.Err()
}
