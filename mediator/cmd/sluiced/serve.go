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

func serve(cfg daemon.Config, ctl controllerFlags, log *slog.Logger) error {
	// Before the socket exists: whoever sees it may stop the daemon at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	agentCfg, joinFleet, err := ctl.agentConfig(cfg, d.DeclaredGPU(), log)
	if err != nil {
		d.Close()
		return err
	}
	srv, err := apiserver.Listen(cfg.Socket, os.FileMode(cfg.SocketMode), apiserver.Handler(d))
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
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
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
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case serveErr = <-errc:
			break loop
		case <-hup:
			if tcp == nil {
				continue
			}
			if err := tcp.ReloadToken(); err != nil {
				log.Warn("SIGHUP: the host api token was not reloaded; the old one stays", "err", err)
			} else {
				log.Info("SIGHUP: the host api token was reloaded")
			}
		case <-tick.C:
			if err := d.Heartbeat(); err != nil {
				log.Warn("persisting usage", "err", err)
			}
		}
	}
	log.Info("shutting down")
	stop()
	<-agentDone // its last sync is done before the daemon closes
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
