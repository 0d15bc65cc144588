package sdk

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
