package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
	"github.com/sluice-gpu/sluice/mediator/internal/vm"
	"golang.org/x/sys/unix"
)

// ManifestVersion is the hand-over manifest's format.
const ManifestVersion = 1

// Manifest is what sluiced hands its successor when it re-executes itself
// (Daemon.Handover, Adopt): the descriptors it keeps across exec and what
// they are. It travels in a memfd whose number the successor is given
// (sluiced --handover-fd).
type Manifest struct {
	Version int `json:"version"`
	// At is when the predecessor stopped serving the guests: the pause
	// they see ends when the successor serves them again.
	At    time.Time `json:"at"`
	Epoch uint64    `json:"epoch"` // kept: the guests see the same mediator
	// Handovers counts the hand-overs since the daemon started afresh,
	// this one included.
	Handovers uint32 `json:"handovers"`
	NextID    uint32 `json:"next_id"` // the next VM id
	Lock      int    `json:"lock"`    // the state dir's lock, still held
	// HostAPI is the host API's listening socket (0: none handed over);
	// the command adopts it, not the daemon.
	HostAPI int          `json:"host_api,omitempty"`
	VMs     []VMHandover `json:"vms"`
}

// VMHandover is one VM in a Manifest.
type VMHandover struct {
	Name string      `json:"name"`
	ID   uint32      `json:"id"`
	VM   vm.Handover `json:"vm"`
}

// ErrBadManifest is returned by DecodeManifest for a manifest the
// successor must not act on.
var ErrBadManifest = errors.New("bad hand-over manifest")

// maxManifest bounds a manifest's size: a few KB a VM.
const maxManifest = 16 << 20

// Encode is m as JSON.
func (m Manifest) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the hand-over manifest: %w", err)
	}
	return b, nil
}

// FDs lists every descriptor m names.
func (m Manifest) FDs() []int {
	fds := []int{m.Lock}
	if m.HostAPI != 0 {
		fds = append(fds, m.HostAPI)
	}
	for _, v := range m.VMs {
		fds = append(fds, v.VM.FDs()...)
	}
	return fds
}

// DecodeManifest decodes and checks a manifest: its version, names and ids
// unique and valid, and every descriptor a number past the standard
// streams, other than self (the manifest's own), named once, and open. The
// descriptors' kinds are checked where they are adopted.
func DecodeManifest(b []byte, self int) (Manifest, error) {
	var m Manifest
	if len(b) > maxManifest {
		return m, fmt.Errorf("%w: %d bytes", ErrBadManifest, len(b))
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if m.Version != ManifestVersion {
		return m, fmt.Errorf("%w: version %d, want %d", ErrBadManifest, m.Version, ManifestVersion)
	}
	names, ids := map[string]bool{}, map[uint32]bool{}
	for _, v := range m.VMs {
		if !hostapi.ValidName(v.Name) || names[v.Name] || v.ID == 0 || v.ID >= m.NextID || ids[v.ID] {
			return m, fmt.Errorf("%w: vm %q id %d (next %d): a bad or repeated name or id", ErrBadManifest, v.Name, v.ID, m.NextID)
		}
		names[v.Name], ids[v.ID] = true, true
	}
	seen := map[int]bool{}
	for _, fd := range m.FDs() {
		if fd < 3 || fd == self || seen[fd] {
			return m, fmt.Errorf("%w: fd %d is a standard stream, the manifest's or repeated", ErrBadManifest, fd)
		}
		seen[fd] = true
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return m, fmt.Errorf("%w: fd %d: %w", ErrBadManifest, fd, err)
		}
	}
	return m, nil
}

// closeFDs closes descriptors a manifest named that nothing adopted.
func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
