package ivshmem

import (
	"context"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// A guest connected before a hand-over keeps its id and eventfds: its
// doorbells reach the adopting server, the adopting server's signals reach
// it, and a guest that joins afterwards gets a new id and the old guest's
// vectors.
func TestAdoptKeepsConnectedGuest(t *testing.T) {
	const vectors = 2
	old, _, _ := testServer(t, ServerConfig{Vectors: vectors})
	ctx := context.Background()
	guest, err := Dial(ctx, old.cfg.SocketPath, vectors)
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	eventually(t, "the guest joins", func() bool { return len(old.Peers()) == 1 })

	h, err := old.Export()
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	if len(h.Peers) != 1 || h.Peers[0].ID != guest.ID() {
		t.Fatalf("hand-over peers %+v, want the guest %d", h.Peers, guest.ID())
	}
	if err := old.Notify(guest.ID(), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Notify after Export: %v, want ErrClosed", err)
	}
	if err := old.Close(); err != nil { // does nothing: the socket stays
		t.Fatal(err)
	}
	if _, err := os.Stat(old.cfg.SocketPath); err != nil {
		t.Fatalf("the socket went with the exported server: %v", err)
	}

	bells := make(chan doorbell, 16)
	cfg := old.cfg
	cfg.OnDoorbell = func(v int, n uint64) { bells <- doorbell{v, n} }
	cfg.OnPeer = nil
	adopted, err := AdoptServer(cfg, h)
	if err != nil {
		t.Fatalf("AdoptServer: %v", err)
	}
	defer adopted.Close()
	if got := adopted.Peers(); len(got) != 1 || got[0] != guest.ID() {
		t.Fatalf("adopted peers %v, want [%d]", got, guest.ID())
	}

	if err := guest.Notify(0, 1); err != nil {
		t.Fatal(err)
	}
	if b := recvBell(t, bells); b.vector != 1 {
		t.Fatalf("doorbell on vector %d, want 1", b.vector)
	}
	if err := adopted.Notify(guest.ID(), 0); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, guest.VectorFD(0))

	second, err := Dial(ctx, cfg.SocketPath, vectors)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.ID() == guest.ID() {
		t.Fatalf("a new guest got the adopted guest's id %d", second.ID())
	}
	eventually(t, "the first guest learns of the second", func() bool { return len(guest.Peers()) == 2 })

	guest.Close()
	eventually(t, "the adopted server sees the guest leave", func() bool { return len(adopted.Peers()) == 1 })
	if err := adopted.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.SocketPath); !os.IsNotExist(err) {
		t.Fatalf("the adopted server left its socket: %v", err)
	}
}

// A hand-over that does not fit the configuration, or names descriptors
// that are not what it says, is refused before anything is closed.
func TestAdoptRefusesBadHandover(t *testing.T) {
	efd, err := newEventfd()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	shmFD := newMemfd(t)
	cfg := ServerConfig{SocketPath: sockPath(t), ShmFD: shmFD, Vectors: 1, OnDoorbell: func(int, uint64) {}}
	cases := map[string]Handover{
		"vectors":      {Listener: 100, Shm: shmFD, Host: []int{efd, efd}},
		"stdin":        {Listener: 0, Shm: shmFD, Host: []int{efd}},
		"repeated fd":  {Listener: efd, Shm: shmFD, Host: []int{efd}},
		"host peer id": {Listener: 100, Shm: shmFD, Host: []int{efd}, Peers: []HandoverPeer{{ID: 0, Conn: 101, FDs: []int{102}}}},
		"not eventfd":  {Listener: 100, Shm: efd, Host: []int{shmFD}},
		"shm no file":  {Listener: 100, Shm: efd + 1000, Host: []int{efd}},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := AdoptServer(cfg, h); !errors.Is(err, ErrBadHandover) {
				t.Fatalf("AdoptServer: %v, want ErrBadHandover", err)
			}
			if _, err := unix.FcntlInt(uintptr(efd), unix.F_GETFD, 0); err != nil {
				t.Fatalf("the eventfd was closed: %v", err)
			}
		})
	}
}
