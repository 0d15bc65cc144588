package pci

import (
	"context"
	"fmt"

	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/internal/shm"
)

// Waking is the device opened through VFIO (bound to vfio-pci, which the
// guest image's init does), with its MSI-X vectors as eventfds: the host
// signals a vector, QEMU raises it, the guest's kernel signals its eventfd.
// It implements sdk.Interrupts, so the SDK's waiters busy-poll for a while
// and then sleep until the host signals, as a process guest's do.
type Waking struct {
	*Transport
	irq *msix
}

var (
	_ sdk.Transport  = (*Waking)(nil)
	_ sdk.Interrupts = (*Waking)(nil)
)

// OpenVFIO finds the device opts selects and opens it through VFIO: BAR2
// (and BAR0 where VFIO maps it; doorbells are pwrites on the device
// otherwise) mapped from the VFIO device, MSI-X vectors as eventfds. A
// device not bound to vfio-pci, or a guest without VFIO, is ErrNoInterrupts:
// then Open it, and poll.
func OpenVFIO(opts Options) (*Waking, error) {
	dev, err := find(opts.sysfs(), opts)
	if err != nil {
		return nil, err
	}
	devRoot := opts.DevRoot
	if devRoot == "" {
		devRoot = DefaultDevRoot
	}
	v, err := openVFIO(devRoot, dev)
	if err != nil {
		return nil, err
	}
	t := &Transport{dev: dev, vfio: v}
	w := &Waking{Transport: t}
	if err := w.setup(); err != nil {
		w.Close()
		return nil, fmt.Errorf("opening %s through VFIO: %w", dev.Address, err)
	}
	return w, nil
}

func (w *Waking) setup() error {
	t := w.Transport
	var err error
	if t.bar0i, err = t.vfio.region(0); err != nil {
		return err
	}
	if t.bar0i.Size < bar0MinSize {
		return fmt.Errorf("BAR0 of %d bytes has no doorbell register", t.bar0i.Size)
	}
	bar0, ok, err := t.vfio.mapBAR(0)
	if err != nil {
		return err
	}
	if ok {
		t.bar0, t.regs = bar0, shm.New(bar0)
	}
	region, ok, err := t.vfio.mapBAR(2)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("VFIO does not map BAR2")
	}
	t.region = region
	if err := t.vfio.enableBusMaster(); err != nil {
		return err
	}
	w.irq, err = enableMSIX(t.vfio)
	return err
}

// ClearVector drops the signals pending on vector (sdk.Interrupts).
func (w *Waking) ClearVector(vector int) error { return w.irq.clear(vector) }

// WaitVector blocks until the host signals vector, or ctx ends
// (sdk.Interrupts).
func (w *Waking) WaitVector(ctx context.Context, vector int) error {
	return w.irq.wait(ctx, vector)
}

// Close releases the vectors' eventfds, the BARs and the device.
func (w *Waking) Close() error {
	var err error
	if w.irq != nil {
		err = w.irq.close()
		w.irq = nil
	}
	if cerr := w.Transport.Close(); err == nil {
		err = cerr
	}
	return err
}
