package proxy

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/internal/proxyproto"
)

func requiresRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: contexts change their thread's uid")
	}
}

func TestContexts(t *testing.T) {
	requiresRoot(t)
	h := newHarness(t, heapSize)
	if err := os.Mkdir(filepath.Join(h.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := h.must(0, abi.SysContextRegister, 1000, 1000, 0o077, h.path(pathA, "sub"))
	if id < 1 || id > abi.MaxContexts {
		t.Fatalf("context id %d", id)
	}
	c := uint8(id)

	// Its identity: uid 1000 cannot read root's 0600 file.
	_, e := h.call(c, abi.SysOpenat, atFDCWD, h.path(pathA, "../secret"), unix.O_RDONLY, 0)
	wantErrno(t, "uid 1000 opens a 0600 file of root", e, abi.ErrnoACCES)
	// Its cwd and umask: "sub" is not writable by uid 1000; make it so and
	// create a file there.
	if err := os.Chmod(filepath.Join(h.dir, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	fd := h.must(c, abi.SysOpenat, atFDCWD, h.path(pathA, "mine"), unix.O_CREAT|unix.O_RDWR, 0o666)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(h.dir, "sub", "mine"), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o777 != 0o600 {
		t.Errorf("file of context: uid %d gid %d mode %o (%v), want 1000 1000 600", st.Uid, st.Gid, st.Mode&0o777, err)
	}
	// Its own fd table: the descriptor means nothing in context 0.
	_, e = h.call(0, abi.SysFstat, uint64(fd), outOff)
	wantErrno(t, "context 1's fd in context 0", e, abi.ErrnoBADF)
	h.must(c, abi.SysFstat, uint64(fd), outOff)

	_, e = h.call(0, abi.SysContextRegister, 0, 0, 0o022, h.path(pathA, "nope"))
	wantErrno(t, "register with a missing cwd", e, abi.ErrnoNOENT)
	_, e = h.call(0, abi.SysContextRegister, 0, 0, 0o022, h.path(pathA, "secret"))
	wantErrno(t, "register with a file as cwd", e, abi.ErrnoNOTDIR)
	_, e = h.call(9, abi.SysContextRegister, 0, 0, 0o022, h.path(pathA, "."))
	wantErrno(t, "register from an unknown context", e, abi.ErrnoSRCH)

	h.must(0, abi.SysContextUnregister, uint64(c))
	_, e = h.call(c, abi.SysFstat, uint64(fd), outOff)
	wantErrno(t, "call in an unregistered context", e, abi.ErrnoSRCH)
	_, e = h.call(0, abi.SysContextUnregister, uint64(c))
	wantErrno(t, "second unregister", e, abi.ErrnoSRCH)
}

func TestContextLimit(t *testing.T) {
	h := newHarness(t, heapSize)
	dot := h.path(pathA, ".")
	reqs := make([]proxyproto.Request, abi.MaxContexts+1)
	for i := range reqs {
		reqs[i] = proxyproto.Request{Number: abi.SysContextRegister, Args: [6]uint64{uint64(os.Geteuid()), uint64(os.Getegid()), 0o022, dot}}
	}
	res, _ := h.batch(reqs)
	ids := map[int64]bool{}
	for _, r := range res[:abi.MaxContexts] {
		if r.Errno != 0 || r.Ret < 1 || r.Ret > abi.MaxContexts || ids[r.Ret] {
			t.Fatalf("register: %+v", r)
		}
		ids[r.Ret] = true
	}
	wantErrno(t, "256th context", res[abi.MaxContexts].Errno, abi.ErrnoAGAIN)
	h.must(0, abi.SysContextUnregister, 17)
	if id := h.must(0, abi.SysContextRegister, uint64(os.Geteuid()), uint64(os.Getegid()), 0, dot); id != 17 {
		t.Errorf("freed id 17, got %d", id)
	}
}

// A call that blocks holds up its own context only.
func TestBlockingCallBlocksItsContextOnly(t *testing.T) {
	h := newHarness(t, heapSize)
	peer, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c := uint8(h.must(0, abi.SysContextRegister, uint64(os.Geteuid()), uint64(os.Getegid()), 0o022, h.path(pathA, ".")))
	fd := uint64(h.must(c, abi.SysSocket, unix.AF_INET, unix.SOCK_DGRAM, 0))
	sa := sockaddrIn(peer.LocalAddr().(*net.UDPAddr))
	copy(h.heap[bufOff:], sa)
	h.must(c, abi.SysConnect, fd, bufOff, uint64(len(sa)))
	copy(h.heap[bufOff+256:], "ping")
	if n := h.must(c, abi.SysSendto, fd, bufOff+256, 4, 0, 0, 0); n != 4 {
		t.Fatalf("sendto = %d", n)
	}
	buf := make([]byte, 16)
	n, from, err := peer.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("peer got %q %v", buf[:n], err)
	}

	// recvfrom blocks context c; context 0 goes on.
	le.PutUint32(h.heap[outOff+128:], maxSockaddr)
	h.seq++
	rq := proxyproto.Request{Slot: 1, Seq: h.seq, Number: abi.SysRecvfrom, Context: c, Args: [6]uint64{fd, outOff + 256, 64, 0, outOff, outOff + 128}}
	if _, err := h.conn.Write(proxyproto.AppendCalls(nil, []proxyproto.Request{rq})); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.must(0, abi.SysClockGet, unix.CLOCK_MONOTONIC, outOff+1024)
	}
	time.AfterFunc(50*time.Millisecond, func() { _, _ = peer.WriteTo([]byte("pong"), from) })
	res, err := proxyproto.DecodeResults(nil, h.recv())
	if err != nil || len(res) != 1 || res[0].Slot != 1 || res[0].Ret != 4 {
		t.Fatalf("recvfrom result %+v %v", res, err)
	}
	if got := string(h.heap[outOff+256 : outOff+260]); got != "pong" {
		t.Errorf("received %q", got)
	}
	if l := le.Uint32(h.heap[outOff+128:]); l != 16 || !equalBytes(h.heap[outOff:outOff+16], sa) {
		t.Errorf("sender address % x (len %d), want % x", h.heap[outOff:outOff+16], l, sa)
	}
}

func equalBytes(a, b []byte) bool { return string(a) == string(b) }

// sockaddrIn is struct sockaddr_in for a.
func sockaddrIn(a *net.UDPAddr) []byte {
	b := make([]byte, 16)
	le.PutUint16(b[0:], unix.AF_INET)
	b[2], b[3] = byte(a.Port>>8), byte(a.Port)
	copy(b[4:], a.IP.To4())
	return b
}

func TestFastcallRegister(t *testing.T) {
	h := newHarness(t, heapSize)
	if err := os.WriteFile(filepath.Join(h.dir, "data"), []byte("fastcall data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd := uint64(h.must(0, abi.SysOpenat, atFDCWD, h.path(pathA, "data"), unix.O_RDONLY, 0))
	ret, e := h.call(0, abi.SysFastcallRegister, uint64(abi.SysPread64), fd, bufOff, 8, 9)
	if e != 0 || ret != 0 || len(h.fastcalls) != 1 {
		t.Fatalf("register = %d %d, %d fastcalls", ret, e, len(h.fastcalls))
	}
	f := h.fastcalls[0]
	if f.Op != abi.SysPread64 || f.HeapOff != bufOff || f.Length != 8 || f.FileOff != 9 {
		t.Errorf("fastcall %+v", f.Fastcall)
	}
	b := make([]byte, 4)
	if n, err := unix.Pread(f.fd, b, 9); err != nil || string(b[:n]) != "data" {
		t.Errorf("the passed descriptor reads %q %v", b[:n], err)
	}
	for _, tc := range []struct {
		name string
		args []uint64
		want abi.Errno
	}{
		{"bad op", []uint64{uint64(abi.SysOpenat), fd, bufOff, 8, 0}, abi.ErrnoINVAL},
		{"write op on a read-only file", []uint64{uint64(abi.SysPwrite64), fd, bufOff, 8, 0}, abi.ErrnoBADF},
		{"closed fd", []uint64{uint64(abi.SysRead), 900, bufOff, 8, 0}, abi.ErrnoBADF},
		{"inherited fd", []uint64{uint64(abi.SysWrite), 1, bufOff, 8, 0}, abi.ErrnoBADF},
		{"range past the heap", []uint64{uint64(abi.SysRead), fd, heapSize - 4, 8, 0}, abi.ErrnoFAULT},
		{"negative offset", []uint64{uint64(abi.SysPread64), fd, bufOff, 8, 1 << 63}, abi.ErrnoINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := h.call(0, abi.SysFastcallRegister, tc.args...)
			wantErrno(t, tc.name, e, tc.want)
		})
	}
}
