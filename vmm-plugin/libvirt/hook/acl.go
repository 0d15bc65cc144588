package hook

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"slices"
)

// POSIX ACLs as Linux stores them in the system.posix_acl_access and
// system.posix_acl_default extended attributes
// (include/uapi/linux/posix_acl_xattr.h): a version word, then {tag u16,
// perm u16, id u32} entries, little endian, sorted by tag and then id. The
// same format vmm-plugin/qemu writes its volume's default ACL in.
const (
	aclXattrAccess  = "system.posix_acl_access"
	aclXattrDefault = "system.posix_acl_default"
	aclVersion      = 2

	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20

	aclUndefinedID = 0xffffffff
)

type aclEntry struct {
	Tag  uint16
	Perm uint16 // rwx as 4|2|1
	ID   uint32 // uid or gid for aclUser and aclGroup, else aclUndefinedID
}

// parseACL decodes an ACL xattr.
func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 {
		return nil, fmt.Errorf("ACL of %d bytes: not a version word and 8-byte entries", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, fmt.Errorf("ACL version %d, want %d", v, aclVersion)
	}
	var acl []aclEntry
	for b = b[4:]; len(b) > 0; b = b[8:] {
		acl = append(acl, aclEntry{binary.LittleEndian.Uint16(b), binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])})
	}
	return acl, nil
}

// encodeACL encodes acl as the kernel wants it: sorted by tag, then id.
func encodeACL(acl []aclEntry) []byte {
	acl = slices.Clone(acl)
	slices.SortFunc(acl, func(a, b aclEntry) int {
		if a.Tag != b.Tag {
			return int(a.Tag) - int(b.Tag)
		}
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range acl {
		b = binary.LittleEndian.AppendUint16(b, e.Tag)
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

// aclFromMode is the minimal ACL equivalent to mode's permission bits.
func aclFromMode(mode fs.FileMode) []aclEntry {
	p := uint16(mode.Perm())
	return []aclEntry{
		{aclUserObj, p >> 6 & 7, aclUndefinedID},
		{aclGroupObj, p >> 3 & 7, aclUndefinedID},
		{aclOther, p & 7, aclUndefinedID},
	}
}

// withUser returns acl with the named user uid granted perm (replacing an
// entry it had) and the mask recomputed as the union of the group class
// (named users, the owning group, named groups), as setfacl -m does.
func withUser(acl []aclEntry, uid uint32, perm uint16) []aclEntry {
	var out []aclEntry
	for _, e := range acl {
		if e.Tag == aclMask || (e.Tag == aclUser && e.ID == uid) {
			continue
		}
		out = append(out, e)
	}
	out = append(out, aclEntry{aclUser, perm, uid})
	var mask uint16
	for _, e := range out {
		if e.Tag == aclUser || e.Tag == aclGroupObj || e.Tag == aclGroup {
			mask |= e.Perm
		}
	}
	return append(out, aclEntry{aclMask, mask, aclUndefinedID})
}

// grants reports whether acl already gives the named user uid perm through
// the mask.
func grants(acl []aclEntry, uid uint32, perm uint16) bool {
	var user, mask bool
	for _, e := range acl {
		switch {
		case e.Tag == aclUser && e.ID == uid:
			user = e.Perm&perm == perm
		case e.Tag == aclMask:
			mask = e.Perm&perm == perm
		}
	}
	return user && mask
}
