package proxy

import (
	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

// The socket calls run in the sandbox's network namespace (isolated, or the
// one the VM's NetNS names). Addresses are copied out of the heap (at most
// 128 bytes, sockaddr_storage); a zero address length means no address.

// socket(domain, type, protocol): AF_UNIX, AF_INET and AF_INET6 only
// (EAFNOSUPPORT otherwise: no netlink, no packet sockets).
func sysSocket(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	switch r.Args[0] {
	case unix.AF_UNIX, unix.AF_INET, unix.AF_INET6:
	default:
		return 0, abi.Errno(unix.EAFNOSUPPORT)
	}
	return ret(unix.Socket(int(r.Args[0]), int(int32(r.Args[1])), int(int32(r.Args[2]))))
}

// connect(fd, addr, addrlen)
func sysConnect(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, e := c.fd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	sa, e := heapSockaddr(c.heap, r.Args[1], r.Args[2])
	if e != 0 {
		return 0, e
	}
	return ret(0, rawConnect(fd, sa))
}

// sendto(fd, buf, len, flags, addr, addrlen)
func sysSendto(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	var sa []byte
	if r.Args[5] != 0 {
		if sa, e = heapSockaddr(c.heap, r.Args[4], r.Args[5]); e != 0 {
			return 0, e
		}
	}
	return ret(rawSendto(fd, b, int(int32(r.Args[3])), sa))
}

// recvfrom(fd, buf, len, flags, addr, addrlen): addrlen is the heap offset
// of a u32 (socklen_t), read before and written after the call as Linux
// does; addr and addrlen both 0 mean no address wanted.
func sysRecvfrom(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	flags := int(int32(r.Args[3]))
	if r.Args[4] == 0 && r.Args[5] == 0 {
		n, _, err := rawRecvfrom(fd, b, flags, nil)
		return ret(n, err)
	}
	lb, e := heapRange(c.heap, r.Args[5], 4)
	if e != 0 {
		return 0, e
	}
	want := min(uint64(le.Uint32(lb)), maxSockaddr)
	out, e := heapRange(c.heap, r.Args[4], want)
	if e != 0 {
		return 0, e
	}
	var sa [maxSockaddr]byte
	n, salen, err := rawRecvfrom(fd, b, flags, sa[:])
	if err != nil {
		return 0, abi.ErrnoOf(err)
	}
	copy(out, sa[:min(uint64(salen), want)])
	le.PutUint32(lb, salen)
	return int64(n), 0
}
