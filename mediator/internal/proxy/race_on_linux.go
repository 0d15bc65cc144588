//go:build race

package proxy

import "syscall"

// raceAcquireIO tells the race detector what a datagram received with raw
// recvmsg ordered (the peer wrote memory before sending it): a successful
// syscall.Read carries that annotation, Recvmsg none. Race builds only.
func raceAcquireIO() {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = syscall.Read(fd, nil)
	syscall.Close(fd)
}
