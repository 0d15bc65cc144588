package vm

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
	"github.com/sluice-gpu/sluice/mediator/internal/channel"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
	"golang.org/x/sys/unix"
)

// FDStore keeps descriptors outside the process, so that a successor
// started after a crash gets them back (systemd's fd store:
// sdnotify.Notifier). The VM stores its memfd, its endpoint's listening
// socket, the host peer's eventfds and each guest's connection and
// eventfds, each under a name of its own (storeName), and removes a
// guest's when it leaves and all when the VM is deleted.
type FDStore interface {
	Store(name string, fds ...int) error
	Remove(name string) error
}

// storeName is the name of one descriptor of VM vm in the store:
// vm/NAME/memfd, vm/NAME/listener, vm/NAME/host/VECTOR,
// vm/NAME/peer/ID/conn, vm/NAME/peer/ID/VECTOR. A VM name has no '/'.
func storeName(vm string, parts ...string) string {
	return "vm/" + vm + "/" + strings.Join(parts, "/")
}

// storeAll puts every descriptor of the VM in the store.
func (v *VM) storeAll() {
	h, err := v.server.Descriptors()
	if err == nil {
		err = v.cfg.Store.Store(storeName(v.cfg.Name, "memfd"), v.memfd)
	}
	if err == nil {
		err = v.cfg.Store.Store(storeName(v.cfg.Name, "listener"), h.Listener)
	}
	for i, fd := range h.Host {
		if err == nil {
			err = v.cfg.Store.Store(storeName(v.cfg.Name, "host", strconv.Itoa(i)), fd)
		}
	}
	if err != nil {
		slog.Warn("fd store: a vm's descriptors are not all stored; a crash would disconnect its guests", "vm", v.cfg.Name, "err", err)
	}
	for _, p := range h.Peers {
		v.storePeer(p.ID, p.Conn, p.FDs)
	}
}

// storePeer puts a guest's connection and eventfds in the store.
func (v *VM) storePeer(id uint16, conn int, fds []int) {
	peer := strconv.Itoa(int(id))
	err := v.cfg.Store.Store(storeName(v.cfg.Name, "peer", peer, "conn"), conn)
	for i, fd := range fds {
		if err == nil {
			err = v.cfg.Store.Store(storeName(v.cfg.Name, "peer", peer, strconv.Itoa(i)), fd)
		}
	}
	if err != nil {
		slog.Warn("fd store: a guest's descriptors are not stored; a crash would disconnect it", "vm", v.cfg.Name, "peer", id, "err", err)
	}
}

// unstorePeer takes a guest that left out of the store.
func (v *VM) unstorePeer(id uint16) {
	peer := strconv.Itoa(int(id))
	err := v.cfg.Store.Remove(storeName(v.cfg.Name, "peer", peer, "conn"))
	for i := range abi.Vectors(len(v.channels)) {
		err = errors.Join(err, v.cfg.Store.Remove(storeName(v.cfg.Name, "peer", peer, strconv.Itoa(i))))
	}
	if err != nil {
		slog.Warn("fd store: a guest that left stays stored", "vm", v.cfg.Name, "peer", id, "err", err)
	}
}

// unstoreAll takes the VM out of the store (it is deleted), its guests
// first, its backend's device state last.
func (v *VM) unstoreAll(peers []uint16) {
	for _, id := range peers {
		v.unstorePeer(id)
	}
	err := errors.Join(v.cfg.Store.Remove(storeName(v.cfg.Name, "memfd")), v.cfg.Store.Remove(storeName(v.cfg.Name, "listener")))
	if v.sysRing.fd >= 0 {
		err = errors.Join(err, v.cfg.Store.Remove(storeName(v.cfg.Name, "sysring")))
	}
	for i := range abi.Vectors(len(v.channels)) {
		err = errors.Join(err, v.cfg.Store.Remove(storeName(v.cfg.Name, "host", strconv.Itoa(i))))
	}
	err = errors.Join(err, v.unstoreDevices())
	if err != nil {
		slog.Warn("fd store: a deleted vm's descriptors stay stored", "vm", v.cfg.Name, "err", err)
	}
}

// StoredVMs lists the VMs whose memfd is among stored (descriptors a
// store passed back, by name), sorted.
func StoredVMs(stored map[string][]int) []string {
	var out []string
	for name := range stored {
		rest, ok := strings.CutPrefix(name, "vm/")
		if vm, ok2 := strings.CutSuffix(rest, "/memfd"); ok && ok2 && !strings.Contains(vm, "/") {
			out = append(out, vm)
		}
	}
	sort.Strings(out)
	return out
}

// FromStore rebuilds VM name's hand-over from the descriptors a store
// passed back after a crash, for Config.Adopt: vectors is the VM's
// vector count (abi.Vectors of its channels). Channel positions are left
// to New, which reads them from the region (what the crashed daemon
// published last). A guest whose descriptors are incomplete is left out.
// The descriptors used are taken out of stored, and only on success: the
// caller closes (and unstores) the rest.
func FromStore(name string, vectors int, stored map[string][]int) (Handover, error) {
	var taken []string // out of stored once the hand-over is whole
	take := func(parts ...string) int {
		key := storeName(name, parts...)
		fds := stored[key]
		if len(fds) == 0 {
			return -1
		}
		taken = append(taken, key)
		return fds[0]
	}
	h := Handover{Memfd: take("memfd")}
	h.Server.Listener = take("listener")
	for i := range vectors {
		h.Server.Host = append(h.Server.Host, take("host", strconv.Itoa(i)))
	}
	prefix := storeName(name, "peer") + "/"
	ids := map[uint16]bool{}
	for key := range stored {
		rest, ok := strings.CutPrefix(key, prefix)
		if id, _, ok2 := strings.Cut(rest, "/"); ok && ok2 {
			if n, err := strconv.ParseUint(id, 10, 16); err == nil && n > 0 {
				ids[uint16(n)] = true
			}
		}
	}
	for id := range ids {
		peer := strconv.Itoa(int(id))
		p := ivshmem.HandoverPeer{ID: id, Conn: take("peer", peer, "conn")}
		for i := range vectors {
			p.FDs = append(p.FDs, take("peer", peer, strconv.Itoa(i)))
		}
		if p.Conn < 0 || len(p.FDs) != vectors || containsNeg(p.FDs) {
			taken = taken[:len(taken)-countNonNeg(append(p.FDs, p.Conn))] // left for the caller to close
			continue
		}
		h.Server.Peers = append(h.Server.Peers, p)
		h.Server.NextID = max(h.Server.NextID, id+1)
	}
	if fd := take("sysring"); fd >= 0 {
		head, err := storedHead(fd)
		if err != nil {
			return Handover{}, fmt.Errorf("vm %q: %w: %w", name, ivshmem.ErrBadHandover, err)
		}
		h.SysRing, h.SyscallHead = fd, head
	}
	h.Orphans = true
	if h.Memfd < 0 || h.Server.Listener < 0 || containsNeg(h.Server.Host) {
		return Handover{}, fmt.Errorf("vm %q: the stored descriptors are incomplete: %w", name, ivshmem.ErrBadHandover)
	}
	shm, err := unix.FcntlInt(uintptr(h.Memfd), unix.F_DUPFD_CLOEXEC, 3) // the server's own
	if err != nil {
		return Handover{}, fmt.Errorf("vm %q: duplicating its memfd: %w", name, err)
	}
	h.Server.Shm = shm
	h.Device = deviceFromStore(name, stored)
	h.DeviceStored = h.Device != nil
	for _, key := range taken {
		for _, fd := range stored[key][1:] { // one file stored twice (systemd keeps one)
			unix.Close(fd)
		}
		delete(stored, key)
	}
	return h, nil
}

func countNonNeg(fds []int) int {
	n := 0
	for _, fd := range fds {
		if fd >= 0 {
			n++
		}
	}
	return n
}

func containsNeg(fds []int) bool {
	for _, fd := range fds {
		if fd < 0 {
			return true
		}
	}
	return false
}

// positions reads the channels' positions from the region, as the crashed
// predecessor published them: a guest that rewrote them can only make its
// own channel run records again (billed) or fail.
func (v *VM) positions() []channel.Position {
	out := make([]channel.Position, v.cfg.Layout.Channels)
	for i := range out {
		off := v.cfg.Layout.ChannelOff(uint32(i))
		out[i] = channel.Position{
			Get: v.region.Load32(off + abi.ChGet), Fence: v.region.Load64(off + abi.ChFence),
			ResetAck: v.region.Load32(off + abi.ChResetAck), Completed: v.region.Load64(off + abi.ChCompleted),
		}
	}
	return out
}

// storeDevice puts the device state the backend kept (keepDevice) in the
// store: vm/NAME/device/BACKEND/I, one name a descriptor, in place of
// what was stored under those names (the store adds a descriptor stored
// under a name it has to those it holds, and a successor would find the
// old one first). Only a state whose descriptors say it all (no Data)
// can be stored.
//
// A state whose files are the very ones stored under its names already
// (regular files, by device and inode: the sim's device files, stored
// when the VM attached, kept by Keep, adopted by a successor) is left as
// it is: removing and storing them again would leave a crash in between
// a successor without them.
func (v *VM) storeDevice(k backend.Kept) error {
	if len(k.Data) != 0 {
		return fmt.Errorf("backend %s's kept state has data besides its descriptors", k.Backend)
	}
	ids := fileIDs(k.FDs)
	v.devMu.Lock()
	defer v.devMu.Unlock()
	prev := v.devStored[k.Backend]
	if ids != nil && slices.Equal(prev.ids, ids) {
		return nil // stored already
	}
	if err := removeDevice(v.cfg.Store, v.cfg.Name, k.Backend, max(len(k.FDs), prev.n)); err != nil {
		return fmt.Errorf("removing what was stored before: %w", err)
	}
	if v.devStored == nil {
		v.devStored = map[string]storedDevice{}
	}
	v.devStored[k.Backend] = storedDevice{n: len(k.FDs)} // what a failure leaves is removed with it
	for i, fd := range k.FDs {
		if err := v.cfg.Store.Store(storeName(v.cfg.Name, "device", k.Backend, strconv.Itoa(i)), fd); err != nil {
			return err
		}
	}
	v.devStored[k.Backend] = storedDevice{n: len(k.FDs), ids: ids}
	return nil
}

// storedDevice is a device state's names in the store: how many, and
// the files under them where they are regular files (fileIDs).
type storedDevice struct {
	n   int
	ids []fileID
}

// fileID is a file's device and inode.
type fileID struct{ dev, ino uint64 }

// fileIDs identifies the files fds are open on: nil unless each is a
// regular file (an eventfd's or a pidfd's inode may be shared with other
// files of its kind, so only a regular file is known by its inode).
func fileIDs(fds []int) []fileID {
	ids := make([]fileID, len(fds))
	for i, fd := range fds {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil
		}
		ids[i] = fileID{dev: st.Dev, ino: st.Ino}
	}
	if len(ids) == 0 {
		return nil
	}
	return ids
}

// adoptedDevice notes that k, a state adopted from the store (the names
// are the predecessor's), is stored: the VM goes on in those very files.
func (v *VM) adoptedDevice(k backend.Kept) {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	if v.devStored == nil {
		v.devStored = map[string]storedDevice{}
	}
	v.devStored[k.Backend] = storedDevice{n: len(k.FDs), ids: fileIDs(k.FDs)}
}

// storedBy reports whether the VM's backend stored a state of backend be
// (StoreKept) since the VM began.
func (v *VM) storedBy(be string) bool {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	_, ok := v.devStored[be]
	return ok
}

// unstoreDevice takes a kept device state out of the store once it is
// refused, or adopted by a backend that goes on in none of it (the VM's
// buffers change from then on, and a successor after a crash must not
// take the old ones for them); and what the backend's RemoveKept names.
func (v *VM) unstoreDevice(k backend.Kept) error {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	if err := removeDevice(v.cfg.Store, v.cfg.Name, k.Backend, len(k.FDs)); err != nil {
		return err
	}
	if v.devStored[k.Backend].n <= len(k.FDs) {
		delete(v.devStored, k.Backend)
	}
	return nil
}

// unstoreDevices takes every device state the VM's backend stored out of
// the store (the VM is deleted).
func (v *VM) unstoreDevices() error {
	v.devMu.Lock()
	defer v.devMu.Unlock()
	var err error
	for be, st := range v.devStored {
		err = errors.Join(err, removeDevice(v.cfg.Store, v.cfg.Name, be, st.n))
	}
	clear(v.devStored)
	return err
}

// removeDevice removes the names of n descriptors of backend be's device
// state of VM name from store.
func removeDevice(store FDStore, name, be string, n int) error {
	var err error
	for i := range n {
		err = errors.Join(err, store.Remove(storeName(name, "device", be, strconv.Itoa(i))))
	}
	return err
}

// Unstore takes everything of VM name's hand-over h out of store: the VM
// is not taken over (the successor's list lacks it), and neither its
// listening socket nor its device state (a GPU worker whose socket the
// store holds) may outlive it there, to be found under its name by a VM
// created anew.
func Unstore(store FDStore, name string, h Handover) error {
	err := errors.Join(store.Remove(storeName(name, "memfd")), store.Remove(storeName(name, "listener")),
		store.Remove(storeName(name, "sysring")))
	for i := range h.Server.Host {
		err = errors.Join(err, store.Remove(storeName(name, "host", strconv.Itoa(i))))
	}
	for _, p := range h.Server.Peers {
		peer := strconv.Itoa(int(p.ID))
		err = errors.Join(err, store.Remove(storeName(name, "peer", peer, "conn")))
		for i := range p.FDs {
			err = errors.Join(err, store.Remove(storeName(name, "peer", peer, strconv.Itoa(i))))
		}
	}
	if k := h.Device; k != nil {
		err = errors.Join(err, removeDevice(store, name, k.Backend, len(k.FDs)))
	}
	if err != nil {
		return fmt.Errorf("vm %q: %w", name, err)
	}
	return nil
}

// deviceStore is the VM's store as its backend sees it
// (backend.VMSpec.Store): the backend stores its live device state there
// itself (the cuda backend's GPU worker, while it runs).
type deviceStore struct{ v *VM }

func (s deviceStore) StoreKept(k backend.Kept) error  { return s.v.storeDevice(k) }
func (s deviceStore) RemoveKept(k backend.Kept) error { return s.v.unstoreDevice(k) }

// deviceFromStore takes VM name's kept device state out of stored (nil
// where there is none, or it is not whole: those descriptors are left for
// the caller to close).
func deviceFromStore(name string, stored map[string][]int) *backend.Kept {
	prefix := storeName(name, "device") + "/"
	var k *backend.Kept
	for key, fds := range stored {
		rest, ok := strings.CutPrefix(key, prefix)
		be, idx, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 || len(fds) == 0 {
			continue
		}
		if k == nil {
			k = &backend.Kept{Backend: be}
		}
		i, err := strconv.Atoi(idx)
		if err != nil || be != k.Backend || i < 0 || i >= len(stored) {
			return nil
		}
		for len(k.FDs) <= i {
			k.FDs = append(k.FDs, -1)
		}
		k.FDs[i] = fds[0]
	}
	if k == nil || containsNeg(k.FDs) {
		return nil
	}
	for i := range k.FDs {
		key := storeName(name, "device", k.Backend, strconv.Itoa(i))
		for _, fd := range stored[key][1:] {
			unix.Close(fd)
		}
		delete(stored, key)
	}
	return k
}
