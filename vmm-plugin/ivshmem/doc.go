// Package ivshmem owns the host side of QEMU's ivshmem-doorbell device: the
// UNIX-socket server that hands guests their shared memory and doorbell
// eventfds, the mediator's own place on that bus as peer 0, and a client
// that speaks the protocol the way QEMU does (for process guests and tests).
//
// # Protocol (QEMU 7.2, docs/specs/ivshmem-spec.rst)
//
// The socket is a UNIX stream socket and only the server ever sends. Every
// message is one little-endian int64, optionally carrying exactly one file
// descriptor as SCM_RIGHTS ancillary data. Because the socket is a stream,
// a receiver reads exactly 8 bytes per message and attributes any fd that
// arrives while those 8 bytes are being read to that message.
//
// When a peer connects, the server sends, in this order:
//
//  1. 0, no fd: the protocol version;
//  2. the peer's own id (0..65535), no fd;
//  3. -1 with the shared-memory fd;
//  4. for every peer P already connected: P, N times, each with one eventfd
//     (vectors 0..N-1); signalling eventfd[P][v] interrupts P's vector v;
//  5. its own id, N times, each with one of its own eventfds: the ones other
//     peers signal to interrupt it.
//
// Afterwards the server sends P with an fd (N times) when peer P connects,
// and P without an fd when P disconnects. EOF means the server is gone;
// QEMU does not reconnect, so the server must be listening before QEMU
// starts and must outlive it.
//
// # Who may connect, and for how long
//
// Whoever holds the shared memory and the host peer's eventfds can run work
// billed to the VM, so Server checks each connection's credentials
// (SO_PEERCRED, recorded by the kernel at connect) before it sends
// anything: root, the server's own uid and ServerConfig.Owners (the VM's
// QEMU user) are admitted, anyone else is closed and reported
// (ErrForeignPeer). The protocol asks nothing of a peer but to read, so
// the server watches its unread bytes (SIOCOUTQ): a peer joins (Peers,
// OnPeer) once it has read its whole handshake, and one that has not
// within ServerConfig.HandshakeTimeout is dropped (ErrNoHandshake). Until
// it joins, a peer's slot goes to the next connection that needs one, so
// connections that never read keep no guest out.
//
// # Roles here
//
// The mediator is both the server and peer 0: guests ring the mediator by
// signalling eventfd[0][v] (QEMU does that in the kernel through a KVM
// ioeventfd on the BAR0 doorbell register), and Server delivers that as
// OnDoorbell(v, count). Guests get ids from 1 upward.
//
// QEMU puts the eventfds it receives into O_NONBLOCK mode, which changes the
// server's copies too (they share one open file description), so the server
// only ever uses them non-blocking, through epoll.
package ivshmem
