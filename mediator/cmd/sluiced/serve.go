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
	agentCfg, joinFleet, err := ctl.agentConfig(cfg, log)
	if err != nil {
		return err
	}
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	srv, err := apiserver.Listen(cfg.Socket, os.FileMode(cfg.SocketMode), apiserver.Handler(d))
	if err != nil {
		d.Close()
		return err
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
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case serveErr = <-errc:
			break loop
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
