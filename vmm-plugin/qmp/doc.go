// Package qmp is a client for the QEMU Machine Protocol (QMP): it connects to
// a QEMU monitor socket (-qmp unix:PATH,server=on,wait=off), runs commands,
// and delivers asynchronous events. Typed helpers cover the commands Sluice
// uses (query-status, system_powerdown, quit, chardev-add/remove,
// device_add/del); Execute runs any other.
//
// # Traps it handles
//
//   - Message size: messages are read with a json.Decoder, not a
//     bufio.Scanner, so replies over 64 KiB work.
//   - Handshake: Dial reads the greeting, sends qmp_capabilities and waits for
//     its reply by id, so an event arriving in between is never taken for the
//     reply; it is kept and returned by HandshakeEvents.
//   - Replies are matched by the "id" each command carries, so Execute is
//     safe from many goroutines. QEMU (without the oob capability, which this
//     package never enables) answers in order; a reply without an id (QEMU's
//     answer to input it could not parse) goes to the oldest unanswered
//     command.
//   - Events: Subscribe before sending the command whose events you want
//     (device_del's DEVICE_DELETED, system_powerdown's SHUTDOWN); an event
//     that arrives while nobody is subscribed to it is gone.
//     Subscribers never block the reader: each has a buffer of
//     SubscriberBuffer events, and events that do not fit are dropped and
//     counted (DroppedEvents).
//   - quit: QEMU may close the socket before or just after its reply; Quit
//     treats that as success.
//   - Connection loss fails every pending and later call with an error
//     wrapping ErrClosed, and closes every subscription's channel.
//   - Startup: DialRetry keeps connecting while the socket does not exist yet
//     or refuses connections, as while QEMU is starting.
//
// QEMU's monitor serves one client at a time: a second connection waits,
// without a greeting, until the first closes, so always bound Dial with a
// context deadline. Cancelling the context of Execute abandons the wait, not
// the command: QEMU still runs it, and its late reply is discarded.
//
// Locking: Monitor.writeMu (one command is one write) is taken before
// Monitor.mu (calls, subscriptions, state) where both are held.
package qmp
