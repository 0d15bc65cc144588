package proxy

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

var le = binary.LittleEndian

func ret(n int, err error) (int64, abi.Errno) {
	if err != nil {
		return -1, abi.ErrnoOf(err)
	}
	return int64(n), 0
}

// openat(dirfd, path, flags, mode)
func sysOpenat(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	dfd, e := c.dirfd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	path, e := heapPath(c.heap, r.Args[1])
	if e != 0 {
		return 0, e
	}
	return ret(unix.Openat(dfd, path, int(int32(r.Args[2])), uint32(r.Args[3])))
}

// mkdirat(dirfd, path, mode)
func sysMkdirat(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	dfd, e := c.dirfd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	path, e := heapPath(c.heap, r.Args[1])
	if e != 0 {
		return 0, e
	}
	return ret(0, unix.Mkdirat(dfd, path, uint32(r.Args[2])))
}

// unlinkat(dirfd, path, flags)
func sysUnlinkat(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	dfd, e := c.dirfd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	path, e := heapPath(c.heap, r.Args[1])
	if e != 0 {
		return 0, e
	}
	return ret(0, unix.Unlinkat(dfd, path, int(int32(r.Args[2]))))
}

// close(fd)
func sysClose(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, e := c.fd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	return ret(0, unix.Close(fd))
}

// fdBuf decodes (fd, heap offset, length) from args[0..2].
func (c *guestContext) fdBuf(r *proxyproto.Request) (int, []byte, abi.Errno) {
	fd, e := c.fd(r.Args[0])
	if e != 0 {
		return 0, nil, e
	}
	b, e := heapRange(c.heap, r.Args[1], r.Args[2])
	return fd, b, e
}

// read(fd, buf, count)
func sysRead(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	return ret(unix.Read(fd, b))
}

// write(fd, buf, count)
func sysWrite(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	return ret(unix.Write(fd, b))
}

// pread64(fd, buf, count, offset)
func sysPread64(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	return ret(unix.Pread(fd, b, int64(r.Args[3])))
}

// pwrite64(fd, buf, count, offset)
func sysPwrite64(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	return ret(unix.Pwrite(fd, b, int64(r.Args[3])))
}

// getdents64(fd, buf, count)
func sysGetdents64(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, b, e := c.fdBuf(r)
	if e != 0 {
		return 0, e
	}
	return ret(unix.Getdents(fd, b))
}

// lseek(fd, offset, whence)
func sysLseek(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, e := c.fd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	off, err := unix.Seek(fd, int64(r.Args[1]), int(int32(r.Args[2])))
	if err != nil {
		return 0, abi.ErrnoOf(err)
	}
	return off, 0
}

// StatSize is the size of the struct stat fstat writes into the heap: Linux
// x86-64's layout.
const StatSize = 144

// fstat(fd, statbuf)
func sysFstat(c *guestContext, r *proxyproto.Request) (int64, abi.Errno) {
	fd, e := c.fd(r.Args[0])
	if e != 0 {
		return 0, e
	}
	b, e := heapRange(c.heap, r.Args[1], StatSize)
	if e != 0 {
		return 0, e
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, abi.ErrnoOf(err)
	}
	putStat(b, &st)
	return 0, 0
}

// putStat encodes st as x86-64's struct stat.
func putStat(b []byte, st *unix.Stat_t) {
	var s [StatSize]byte
	le.PutUint64(s[0:], uint64(st.Dev))
	le.PutUint64(s[8:], uint64(st.Ino))
	le.PutUint64(s[16:], uint64(st.Nlink))
	le.PutUint32(s[24:], uint32(st.Mode))
	le.PutUint32(s[28:], st.Uid)
	le.PutUint32(s[32:], st.Gid)
	le.PutUint64(s[40:], uint64(st.Rdev))
	le.PutUint64(s[48:], uint64(st.Size))
	le.PutUint64(s[56:], uint64(st.Blksize))
	le.PutUint64(s[64:], uint64(st.Blocks))
	putTimespec(s[72:], st.Atim)
	putTimespec(s[88:], st.Mtim)
	putTimespec(s[104:], st.Ctim)
	copy(b, s[:])
}

func putTimespec(b []byte, ts unix.Timespec) {
	le.PutUint64(b[0:], uint64(ts.Sec))
	le.PutUint64(b[8:], uint64(ts.Nsec))
}

// preadFull fills b from fd at off, zeros past the end of the file.
func preadFull(fd int, b []byte, off int64) abi.Errno {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return abi.ErrnoOf(err)
		case n == 0:
			clear(b)
			return 0
		}
		b, off = b[n:], off+int64(n)
	}
	return 0
}
