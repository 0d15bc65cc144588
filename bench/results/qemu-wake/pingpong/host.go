package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-gpu/sluice/internal/shm"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

func hostCmd() *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "host",
		Short: "Serve an ivshmem endpoint at --socket and answer each doorbell until SIGTERM",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return host(socket) },
	}
	c.Flags().StringVar(&socket, "socket", "", "the endpoint's UNIX socket (QEMU's chardev path)")
	_ = c.MarkFlagRequired("socket")
	return c
}

// host answers on the server's epoll goroutine, as sluiced's channels do.
func host(socket string) error {
	fd, err := shm.NewMemfd("pingpong", regionSize)
	if err != nil {
		return err
	}
	mem, err := shm.Map(fd, regionSize)
	if err != nil {
		return err
	}
	r := shm.New(mem)
	var srv *ivshmem.Server
	srv, err = ivshmem.NewServer(ivshmem.ServerConfig{
		SocketPath: socket,
		ShmFD:      fd,
		Vectors:    vectors,
		OnDoorbell: func(int, uint64) {
			r.Store64(offAnswer, r.Load64(offSeq))
			if r.Load64(offNotify) != 0 {
				for _, p := range srv.Peers() {
					_ = srv.Notify(p, 0)
				}
			}
		},
	})
	if err != nil {
		return fmt.Errorf("serving %s: %w", socket, err)
	}
	defer srv.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return nil
}
