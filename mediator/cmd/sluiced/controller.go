package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
	"github.com/sluice-gpu/sluice/mediator/internal/fleetagent"
)

// controllerFlags are the --controller* flags: how sluiced joins a fleet.
type controllerFlags struct {
	url, token, host, address, gpus string
	gpuMemory, sysfs                string // for GPUs discovered in sysfs, without --controller-gpus
	interval                        time.Duration
	metricsListen                   string // --metrics-listen; not a controller flag, but parsed with them
}

// agentConfig is the fleet agent's configuration, or ok false without
// --controller.
func (c controllerFlags) agentConfig(cfg daemon.Config, log *slog.Logger) (fleetagent.Config, bool, error) {
	if c.url == "" {
		return fleetagent.Config{}, false, nil
	}
	gpus, err := c.inventory(cfg.Backend, log)
	if err != nil {
		return fleetagent.Config{}, false, err
	}
	return fleetagent.Config{Controller: c.url, Token: c.token, Host: c.host, Address: c.address, Version: daemon.Version,
		GPUs: gpus, StatePath: filepath.Join(cfg.StateDir, "controller-agent.json"), Interval: c.interval, Log: log}, true, nil
}

// inventory is the GPU inventory reported to the controller: the declared
// one (--controller-gpus) wins; without it, the GPUs found in sysfs with
// --controller-gpu-memory each; none found (or sysfs unreadable): one GPU
// named after the backend with 1GiB, as before discovery.
func (c controllerFlags) inventory(backend string, log *slog.Logger) ([]controllerapi.GPUReport, error) {
	if c.gpus != "" {
		gpus, err := fleetagent.ParseGPUs(c.gpus)
		if err != nil {
			return nil, fmt.Errorf("--controller-gpus: %w", err)
		}
		return gpus, nil
	}
	mem, err := fleetagent.ParseSize(c.gpuMemory)
	if err != nil {
		return nil, fmt.Errorf("--controller-gpu-memory: %w", err)
	}
	gpus, err := fleetagent.DiscoverGPUs(c.sysfs, mem)
	if err != nil {
		log.Warn("reading the GPU inventory from sysfs failed; reporting the default one", "sysfs", c.sysfs, "err", err)
	}
	if len(gpus) > 0 {
		log.Info("GPU inventory read from sysfs", "sysfs", c.sysfs, "gpus", len(gpus), "memory_each", mem)
		return gpus, nil
	}
	return fleetagent.ParseGPUs(backend + ":1GiB")
}
