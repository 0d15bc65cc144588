package ivshmem

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// socketPair returns a raw sending end and a receiving *net.UnixConn.
func socketPair(t testing.TB) (int, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[1]), "recv")
	nc, err := net.FileConn(f) // dups
	f.Close()
	if err != nil {
		unix.Close(fds[0])
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); nc.Close() })
	return fds[0], nc.(*net.UnixConn)
}

type chunk struct {
	data []byte
	nfds int
}

// splitStream cuts data into chunks as cuts says: per cut byte, the low 4
// bits give the length (1..16) and the next 2 the fd count (0..2).
func splitStream(data, cuts []byte) []chunk {
	var out []chunk
	for i := 0; len(data) > 0; i++ {
		n, nfds := len(data), 0
		if len(cuts) > 0 {
			c := cuts[i%len(cuts)]
			n, nfds = min(int(c&15)+1, len(data)), int(c>>4&3)%3
		}
		out = append(out, chunk{data[:n], nfds})
		data = data[n:]
	}
	return out
}

// FuzzMsgReader sends a byte stream cut into arbitrary chunks, some
// carrying fds, and checks that the reader returns exactly the 8-byte
// messages of the stream, gives every fd to the message holding its
// chunk's first byte, ends with EOF or ErrUnexpectedEOF, and loses no fd.
func FuzzMsgReader(f *testing.F) {
	f.Add(binary.LittleEndian.AppendUint64(nil, 7), []byte{0x13, 0x14})
	f.Add(make([]byte, 24), []byte{0x02, 0x1f, 0x20, 0x05})
	f.Add(make([]byte, 13), []byte{0x1c})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		if len(data) > 512 {
			data = data[:512]
		}
		tx, rx := socketPair(t)
		chunks := splitStream(data, cuts)
		want := map[int]int{} // message index -> fds
		sent, off := 0, 0
		for _, c := range chunks {
			want[off/8] += c.nfds
			sent += c.nfds
			off += len(c.data)
		}
		// Send concurrently: many small sends outgrow the socket buffer.
		errc := make(chan error, 1)
		go func() { errc <- sendChunks(tx, chunks) }()
		defer func() {
			rx.Close() // unblocks the sender if the reader stopped early
			if err := <-errc; err != nil && !t.Failed() {
				t.Error(err)
			}
		}()

		r, got := newMsgReader(rx), 0
		for i := 0; ; i++ {
			val, fds, err := r.read()
			got += len(fds)
			closeFDs(fds)
			if len(fds) != want[i] {
				t.Fatalf("message %d: %d fds, want %d", i, len(fds), want[i])
			}
			if err != nil {
				wantErr := io.EOF
				if len(data)%8 != 0 {
					wantErr = io.ErrUnexpectedEOF
				}
				if i != len(data)/8 || !errors.Is(err, wantErr) {
					t.Fatalf("message %d of %d bytes: %v, want %v", i, len(data), err, wantErr)
				}
				break
			}
			if w := int64(binary.LittleEndian.Uint64(data[8*i:])); val != w {
				t.Fatalf("message %d: %d, want %d", i, val, w)
			}
		}
		if got != sent {
			t.Fatalf("received %d fds, sent %d", got, sent)
		}
	})
}

func sendChunks(tx int, chunks []chunk) error {
	defer unix.Shutdown(tx, unix.SHUT_WR)
	for _, c := range chunks {
		fds, err := newEventfds(c.nfds)
		if err != nil {
			return err
		}
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		err = unix.Sendmsg(tx, c.data, oob, nil, 0)
		closeFDs(fds)
		if err != nil {
			return err
		}
	}
	return nil
}
