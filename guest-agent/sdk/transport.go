package sdk

import "context"

// Transport is how the SDK reaches the shared region and the host's
// doorbells. transport/process implements it for a host process that joins an
// ivshmem server; transport/pci for the ivshmem PCI device inside a VM.
type Transport interface {
	// Region is the whole shared region (BAR2 or the memfd mapping). It stays
	// valid until Close.
	Region() []byte
	// Doorbell signals vector on the peer hostPeer (the host peer id from the
	// header).
	Doorbell(hostPeer uint16, vector int) error
	// Close unmaps the region and releases the transport.
	Close() error
}

// Interrupts is implemented by a Transport on which the host can signal the
// guest: transport/process holds its peer's own ivshmem eventfds, and
// transport/pci's Waking the MSI-X vectors of a device bound to vfio-pci.
// With it, and a host that announces abi.FeatureWake, a waiter that has
// busy-polled for Poll.WakeSpin arms its channel's wake word and sleeps
// until the host signals the channel's vector (see Poll). Transports
// without it poll.
type Interrupts interface {
	// ID is this guest's ivshmem peer id: the peer the host signals.
	ID() uint16
	// ClearVector drops the signals pending on vector.
	ClearVector(vector int) error
	// WaitVector blocks until vector is signalled (it may return early,
	// and consumes the signal) or ctx ends (then it returns ctx's error).
	WaitVector(ctx context.Context, vector int) error
}
