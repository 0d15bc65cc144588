package ivshmem

import (
	"encoding/binary"
	"errors"
	"testing"
)

func msgs(vals ...int64) []message {
	out := make([]message, len(vals))
	for i, v := range vals {
		out[i] = message{val: v}
	}
	return out
}

// fd marks messages as carrying one fd.
func fd(ms ...message) []message {
	for i := range ms {
		ms[i].fds = 1
	}
	return ms
}

func cat(parts ...[]message) []message {
	var out []message
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestDecoder(t *testing.T) {
	// Valid handshake for id 2 with 2 vectors, host 0 and peer 1 present.
	hs := cat(msgs(0, 2), fd(msgs(-1, 0, 0, 1, 1, 2, 2)...))
	for _, tc := range []struct {
		name    string
		in      []message
		wantErr int // index of the first failing message, -1 for none
		done    bool
	}{
		{"valid handshake", hs, -1, true},
		{"then connect and disconnect", cat(hs, fd(msgs(3, 3)...), msgs(3, 1)), -1, true},
		{"reconnect of the same id", cat(hs, msgs(1), fd(msgs(1, 1)...)), -1, true},
		{"own vectors first", cat(msgs(0, 2), fd(msgs(-1, 2, 2, 0)...)), -1, true},
		{"partial handshake", hs[:6], -1, false},
		{"bad version", cat(msgs(1), hs[1:]), 0, false},
		{"fd on version", cat(fd(msgs(0)...), hs[1:]), 0, false},
		{"id too large", cat(msgs(0, 65536)), 1, false},
		{"shm without fd", cat(msgs(0, 2, -1)), 2, false},
		{"two fds", cat(msgs(0, 2), []message{{val: -1, fds: 2}}), 2, false},
		{"value below -1", cat(hs[:3], fd(msgs(-5)...)), 3, false},
		{"third vector for a peer", cat(hs[:5], fd(msgs(0)...)), 5, false},
		{"third own vector", cat(hs, fd(msgs(2)...)), len(hs), true},
		{"unknown disconnect", cat(hs, msgs(9)), len(hs), true},
		{"own disconnect", cat(hs, msgs(2)), len(hs), true},
		{"second shm", cat(hs, fd(msgs(-1)...)), len(hs), true},
		{"stays failed", cat(msgs(1), msgs(0, 2)), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDecoder(2)
			failed := -1
			for i, m := range tc.in {
				ev, err := d.feed(m)
				if err != nil {
					if !errors.Is(err, ErrProtocol) {
						t.Fatalf("message %d: error %v is not ErrProtocol", i, err)
					}
					if failed < 0 {
						failed = i
					}
					continue
				}
				if failed >= 0 {
					t.Fatalf("message %d accepted after an error", i)
				}
				if ev.takesFD() != (m.fds == 1) {
					t.Fatalf("message %d: event %+v for %d fds", i, ev, m.fds)
				}
			}
			if failed != tc.wantErr {
				t.Fatalf("first error at %d, want %d", failed, tc.wantErr)
			}
			if d.handshakeDone() != tc.done {
				t.Fatalf("handshakeDone() = %v, want %v", d.handshakeDone(), tc.done)
			}
		})
	}
}

// FuzzDecoder feeds arbitrary message streams: each 9 input bytes are a
// little-endian value and an fd count (0..3). The decoder must not panic,
// must keep an fd exactly when the message had one, never hand out more
// than vectors fds per peer, and stay failed after an error.
func FuzzDecoder(f *testing.F) {
	enc := func(ms []message) []byte {
		var b []byte
		for _, m := range ms {
			b = binary.LittleEndian.AppendUint64(b, uint64(m.val))
			b = append(b, byte(m.fds))
		}
		return b
	}
	hs := cat(msgs(0, 2), fd(msgs(-1, 0, 0, 1, 1, 2, 2)...))
	f.Add(uint8(2), enc(hs))
	f.Add(uint8(2), enc(cat(hs, fd(msgs(3, 3)...), msgs(3))))
	f.Add(uint8(1), enc(cat(msgs(0, 65535), fd(msgs(-1, 65535, 65535)...))))
	f.Add(uint8(2), enc(cat(msgs(0, 2), []message{{val: -1, fds: 3}})))
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, vectors uint8, data []byte) {
		n := int(vectors)%4 + 1
		d := newDecoder(n)
		own := 0
		peers := map[uint16]int{}
		var failed error
		for len(data) >= 9 {
			m := message{val: int64(binary.LittleEndian.Uint64(data)), fds: int(data[8] % 4)}
			data = data[9:]
			ev, err := d.feed(m)
			if failed != nil {
				if err == nil {
					t.Fatal("message accepted after an error")
				}
				continue
			}
			if err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("error %v is not ErrProtocol", err)
				}
				failed = err
				continue
			}
			if m.fds > 1 || m.val < -1 || m.val > MaxPeerID {
				t.Fatalf("accepted %+v", m)
			}
			if ev.takesFD() != (m.fds == 1) {
				t.Fatalf("event %+v for %d fds", ev, m.fds)
			}
			switch ev.kind {
			case evOwnVector:
				if ev.vector != own {
					t.Fatalf("own vector %d, want %d", ev.vector, own)
				}
				own++
			case evPeerVector:
				if ev.vector != peers[ev.peer] {
					t.Fatalf("peer %d vector %d, want %d", ev.peer, ev.vector, peers[ev.peer])
				}
				peers[ev.peer]++
			case evPeerGone:
				if _, ok := peers[ev.peer]; !ok {
					t.Fatalf("unknown peer %d gone", ev.peer)
				}
				delete(peers, ev.peer)
			}
			if own > n || peers[ev.peer] > n {
				t.Fatalf("more than %d vectors", n)
			}
		}
		if d.handshakeDone() != (own == n) {
			t.Fatalf("handshakeDone() = %v with %d of %d own vectors", d.handshakeDone(), own, n)
		}
	})
}

func TestDecoderLearnsVectors(t *testing.T) {
	tests := []struct {
		name    string
		msgs    []message
		vectors int // learned; 0: the sequence must fail
	}{
		{"host peer first", []message{{0, 0}, {3, 0}, {-1, 1}, {0, 1}, {0, 1}, {0, 1}, {3, 1}, {3, 1}, {3, 1}}, 3},
		{"two peers before us", []message{{0, 0}, {5, 0}, {-1, 1}, {0, 1}, {0, 1}, {2, 1}, {2, 1}, {5, 1}, {5, 1}}, 2},
		{"no peer before us", []message{{0, 0}, {1, 0}, {-1, 1}, {1, 1}}, 0},
		{"more own fds than the host peer has", []message{{0, 0}, {1, 0}, {-1, 1}, {0, 1}, {1, 1}, {1, 1}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDecoder(0)
			var err error
			for _, m := range tt.msgs {
				if _, err = d.feed(m); err != nil {
					break
				}
			}
			if tt.vectors == 0 {
				if err == nil && d.handshakeDone() && d.vectors == 1 {
					return // ended after one own fd: consistent with a 1-vector host peer
				}
				if err == nil {
					t.Fatalf("accepted, vectors %d, done %v", d.vectors, d.handshakeDone())
				}
				return
			}
			if err != nil || !d.handshakeDone() || d.vectors != tt.vectors {
				t.Fatalf("err %v, done %v, vectors %d, want %d", err, d.handshakeDone(), d.vectors, tt.vectors)
			}
		})
	}
}
