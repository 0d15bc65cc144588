package pci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// The ivshmem device's PCI ids and its BAR0 registers.
const (
	VendorID = 0x1af4
	DeviceID = 0x1110

	RegIntrMask   = 0
	RegIntrStatus = 4
	RegIVPosition = 8
	RegDoorbell   = 12
	bar0MinSize   = 16
)

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

// ErrNotFound means no (matching) ivshmem device is present.
var ErrNotFound = errors.New("no ivshmem device found")

// Device is an ivshmem device found in sysfs.
type Device struct {
	Address string // PCI address, like 0000:00:04.0
	Path    string // its sysfs directory
}

// Find lists the ivshmem devices under root's bus/pci/devices, ordered by
// PCI address.
func Find(root string) ([]Device, error) {
	dir := filepath.Join(root, "bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	var devs []Device
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		vendor, err1 := readHex(filepath.Join(p, "vendor"))
		device, err2 := readHex(filepath.Join(p, "device"))
		if err1 != nil || err2 != nil || vendor != VendorID || device != DeviceID {
			continue
		}
		devs = append(devs, Device{Address: e.Name(), Path: p})
	}
	slices.SortFunc(devs, func(a, b Device) int { return strings.Compare(a.Address, b.Address) })
	return devs, nil
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
}

// Options selects a device. Address wins over Index when set.
type Options struct {
	SysfsRoot string // DefaultSysfsRoot when empty
	DevRoot   string // DefaultDevRoot when empty (OpenVFIO)
	Address   string // PCI address; a short form without the domain ("00:04.0") is accepted
	Index     int    // position in Find's order
	// Wait is how long Open looks again for a device that is not there
	// (yet): a device hot-plugged into a running guest appears in sysfs
	// only once the guest's kernel has added it, which takes a while after
	// the host's device_add returned. 0: look once.
	Wait time.Duration
}

// findPoll is how often Open looks again while it waits for a device.
const findPoll = 50 * time.Millisecond

// Select picks the device opts name from devs.
func Select(devs []Device, opts Options) (Device, error) {
	if len(devs) == 0 {
		return Device{}, ErrNotFound
	}
	if opts.Address != "" {
		for _, d := range devs {
			if d.Address == opts.Address || d.Address == "0000:"+opts.Address {
				return d, nil
			}
		}
		return Device{}, fmt.Errorf("ivshmem device at %s: %w (have %s)", opts.Address, ErrNotFound, addresses(devs))
	}
	if opts.Index < 0 || opts.Index >= len(devs) {
		return Device{}, fmt.Errorf("ivshmem device #%d: %w (have %d: %s)", opts.Index, ErrNotFound, len(devs), addresses(devs))
	}
	return devs[opts.Index], nil
}

func addresses(devs []Device) string {
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = d.Address
	}
	return strings.Join(s, ", ")
}

// Transport is an opened ivshmem device.
type Transport struct {
	dev    Device
	bar0   []byte
	regs   *shm.Region // nil through VFIO where it does not map BAR0: vfio's pread/pwrite then
	region []byte
	vfio   *vfioDevice // nil: opened through sysfs
	bar0i  vfioRegionInfo
}

var _ sdk.Transport = (*Transport)(nil)

// Open finds, enables and maps the device opts selects.
func Open(opts Options) (*Transport, error) {
	dev, err := find(opts.sysfs(), opts)
	if err != nil {
		return nil, err
	}
	if err := enable(dev); err != nil {
		return nil, err
	}
	bar0, err := mapBAR(dev, 0)
	if err != nil {
		return nil, err
	}
	if len(bar0) < bar0MinSize {
		shm.Unmap(bar0)
		return nil, fmt.Errorf("%s: BAR0 of %d bytes has no doorbell register", dev.Address, len(bar0))
	}
	region, err := mapBAR(dev, 2)
	if err != nil {
		shm.Unmap(bar0)
		return nil, err
	}
	return &Transport{dev: dev, bar0: bar0, regs: shm.New(bar0), region: region}, nil
}

func (o Options) sysfs() string {
	if o.SysfsRoot == "" {
		return DefaultSysfsRoot
	}
	return o.SysfsRoot
}

// find selects the device opts names, looking again every findPoll for up
// to opts.Wait while it is not there.
func find(root string, opts Options) (Device, error) {
	deadline := time.Now().Add(opts.Wait)
	for {
		devs, err := Find(root)
		if err != nil {
			return Device{}, err
		}
		dev, err := Select(devs, opts)
		if err == nil || !errors.Is(err, ErrNotFound) || !time.Now().Before(deadline) {
			return dev, err
		}
		time.Sleep(findPoll)
	}
}

// mapBAR maps BAR n whole. Its size is the resource file's (sysfs sizes it to
// the BAR), or else the BAR's line in the device's resource table.
func mapBAR(dev Device, n int) ([]byte, error) {
	path := filepath.Join(dev.Path, "resource"+strconv.Itoa(n))
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s BAR%d: %w", dev.Address, n, err)
	}
	size := st.Size()
	if size == 0 {
		if size, err = tableSize(dev, n); err != nil {
			return nil, err
		}
	}
	if size <= 0 || size > 1<<40 {
		return nil, fmt.Errorf("%s BAR%d: unusable size %d", dev.Address, n, size)
	}
	b, err := shm.MapFile(path, 0, int(size))
	if err != nil {
		return nil, fmt.Errorf("%s BAR%d: %w", dev.Address, n, err)
	}
	return b, nil
}

// tableSize reads BAR n's size from the device's resource table.
func tableSize(dev Device, n int) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dev.Path, "resource"))
	if err != nil {
		return 0, fmt.Errorf("%s BAR%d size: %w", dev.Address, n, err)
	}
	size, err := ParseResourceSize(string(b), n)
	if err != nil {
		return 0, fmt.Errorf("%s BAR%d size: %w", dev.Address, n, err)
	}
	return size, nil
}

// ParseResourceSize decodes a sysfs resource table (one line per resource:
// "start end flags" in hex) and returns resource n's size.
func ParseResourceSize(table string, n int) (int64, error) {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if n < 0 || n >= len(lines) {
		return 0, fmt.Errorf("resource table has %d lines, no resource %d", len(lines), n)
	}
	f := strings.Fields(lines[n])
	if len(f) < 2 {
		return 0, fmt.Errorf("bad resource line %q", lines[n])
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
	end, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
	if err1 != nil || err2 != nil || start == 0 || end < start || end-start >= 1<<62 {
		return 0, fmt.Errorf("bad or unassigned resource line %q", lines[n])
	}
	return int64(end - start + 1), nil
}

// enable turns the device on (memory decoding), as a driver's probe would.
func enable(dev Device) error {
	f, err := os.OpenFile(filepath.Join(dev.Path, "enable"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("enabling %s: %w", dev.Address, err)
	}
	_, err = f.Write([]byte("1"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("enabling %s: %w", dev.Address, err)
	}
	return nil
}

// Device is the device this transport opened.
func (t *Transport) Device() Device { return t.dev }

// Region is BAR2, the shared region.
func (t *Transport) Region() []byte { return t.region }

// ID is this guest's ivshmem peer id (the IVPosition register).
func (t *Transport) ID() uint16 {
	if t.regs == nil && t.vfio != nil {
		v, _ := t.vfio.reg32(t.bar0i, RegIVPosition)
		return uint16(v)
	}
	return uint16(t.regs.Load32(RegIVPosition))
}

// Doorbell writes (hostPeer << 16) | vector to the Doorbell register in one
// 32-bit store: KVM's ioeventfd matches exactly that value and signals the
// host's eventfd without an exit to QEMU.
func (t *Transport) Doorbell(hostPeer uint16, vector int) error {
	if vector < 0 || vector > 0xff {
		return fmt.Errorf("doorbell vector %d: QEMU takes 0..255", vector)
	}
	v := uint32(hostPeer)<<16 | uint32(vector)
	switch {
	case t.regs != nil:
		t.regs.Store32(RegDoorbell, v)
	case t.vfio != nil:
		if err := t.vfio.setReg32(t.bar0i, RegDoorbell, v); err != nil {
			return fmt.Errorf("doorbell through VFIO: %w", err)
		}
	default:
		return errors.New("doorbell on a closed ivshmem device")
	}
	return nil
}

// Close unmaps both BARs and, through VFIO, releases the device.
func (t *Transport) Close() error {
	var errs []error
	for _, b := range [][]byte{t.region, t.bar0} {
		if b != nil {
			errs = append(errs, shm.Unmap(b))
		}
	}
	if t.vfio != nil {
		errs = append(errs, t.vfio.close())
	}
	t.region, t.bar0, t.regs, t.vfio = nil, nil, nil, nil
	return errors.Join(errs...)
}
