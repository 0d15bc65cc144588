package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
	"github.com/sluice-gpu/sluice/mediator/internal/fleetagent"
)

// serve runs the daemon until SIGINT or SIGTERM, or until SIGHUP hands it
// over to a successor; from says what it takes over.
func serve(cfg daemon.Config, ctl controllerFlags, log *slog.Logger, from start) error {
	m := from.handover
	// Before the socket exists: whoever sees it may stop the daemon at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// As early: a SIGHUP left to its default would end the daemon. One
	// that comes while it starts hands over once it has.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d, err := openDaemon(cfg, from)
	if err != nil {
		return err
	}
	agentCfg, joinFleet, err := ctl.agentConfig(cfg, d.DeclaredGPU(), log)
	if err != nil {
		d.Close()
		return err
	}
	srv, err := listenAPI(cfg, d, m)
	if err != nil {
		d.Close()
		return err
	}
	var tcp *apiserver.Server
	if cfg.HostTCP.Addr != "" {
		if tcp, err = apiserver.ListenTCP(cfg.HostTCP, apiserver.Handler(d)); err != nil {
			srv.Shutdown(context.Background())
			d.Close()
			return err
		}
		go func() {
			if err := tcp.Serve(); err != nil {
				log.Error("serving the host api over tcp", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tcp.Shutdown(sctx)
		}()
		log.Info("host api over tcp", "addr", tcp.Addr().String(), "tls", cfg.HostTCP.CertFile != "")
	}
	if ctl.metricsListen != "" {
		stopMetrics, err := serveMetrics(ctl.metricsListen, d, log)
		if err != nil {
			srv.Shutdown(context.Background())
			d.Close()
			return err
		}
		defer stopMetrics()
	}
	agentDone := make(chan struct{})
	if joinFleet {
		agent, err := fleetagent.New(agentCfg, d)
		if err != nil {
			srv.Shutdown(context.Background())
			d.Close()
			return err
		}
		go func() { defer close(agentDone); agent.Run(ctx) }()
	} else {
		close(agentDone)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	log.Info("ready", "socket", cfg.Socket, "backend", cfg.Backend, "clock", cfg.Clock,
		"state_dir", cfg.StateDir, "endpoint_dir", cfg.EndpointDir, "epoch", fmt.Sprintf("%#x", d.Epoch()))

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var serveErr error
	var successor string // the binary a SIGHUP hands over to
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case serveErr = <-errc:
			break loop
		case <-hup:
			if successor, err = upgradeCheck(d); err == nil {
				break loop
			}
			log.Warn("SIGHUP: no hand-over to a successor; sluiced goes on", "err", err)
			reloadToken(tcp, log)
		case <-tick.C:
			if err := d.Heartbeat(); err != nil {
				log.Warn("persisting usage", "err", err)
			}
		}
	}
	stop()
	<-agentDone // its last sync is done before the daemon closes
	if successor != "" {
		return handOver(successor, d, srv, log) // returns only on failure
	}
	if cfg.FDStore != nil && serveErr == nil {
		return leaveToStore(d, srv, log)
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("stopping host api", "err", err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("closing: %w", err)
	}
	return serveErr
}

// start is what a daemon starts from: a predecessor's hand-over (SIGHUP),
// or the descriptors systemd's fd store kept (after a crash or a
// restart), or neither.
type start struct {
	handover *daemon.Manifest
	stored   map[string][]int
}

// openDaemon starts the daemon, or adopts a predecessor's VMs.
func openDaemon(cfg daemon.Config, from start) (*daemon.Daemon, error) {
	switch {
	case from.handover != nil:
		return daemon.Adopt(cfg, *from.handover)
	case len(from.stored) > 0:
		return daemon.AdoptStore(cfg, from.stored)
	}
	return daemon.New(cfg)
}

// listenAPI serves the host API on its socket: a new one, or the one a
// predecessor handed over.
func listenAPI(cfg daemon.Config, d *daemon.Daemon, m *daemon.Manifest) (*apiserver.Server, error) {
	if m != nil && m.HostAPI != 0 {
		return apiserver.Adopt(m.HostAPI, cfg.Socket, apiserver.Handler(d))
	}
	return apiserver.Listen(cfg.Socket, os.FileMode(cfg.SocketMode), apiserver.Handler(d))
}

// reloadToken reads the TCP host API's token file again (a SIGHUP that
// does not hand over).
func reloadToken(tcp *apiserver.Server, log *slog.Logger) {
	if tcp == nil {
		return
	}
	if err := tcp.ReloadToken(); err != nil {
		log.Warn("SIGHUP: the host api token was not reloaded; the old one stays", "err", err)
	} else {
		log.Info("SIGHUP: the host api token was reloaded")
	}
}
