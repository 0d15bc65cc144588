// Package control is the protocol between the host and the agent running
// inside a guest, over a byte stream the VMM provides: a second serial port
// of the VM (ttyS1 in the guest, a UNIX socket chardev on the host). It lets
// the host start a workload in a running guest and collect its JSON result
// without a network, a guest driver or a change to the shared-memory ABI.
//
// The stream carries one JSON object per line, at most MaxLine bytes. The
// guest speaks first: a Hello with the protocol version whenever it starts
// serving (and again when asked). The host then sends Requests, each naming
// an agent command line; the guest answers each with a Response carrying the
// same id, the command's exit status and what it printed. One request runs at
// a time, in order.
//
// Lines that are not protocol messages (a serial line can carry noise, and a
// host can attach in the middle of a line) are skipped by ReadMessage's
// callers; every field is validated after decoding, because each side treats
// the other as untrusted.
package control
