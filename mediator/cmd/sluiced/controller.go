package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/mediator/internal/daemon"
	"github.com/sluice-gpu/sluice/mediator/internal/fleetagent"
	"github.com/sluice-gpu/sluice/mediator/internal/gpuinv"
)

// controllerFlags are the --controller* flags: how sluiced joins a fleet.
type controllerFlags struct {
	url, token, host, address, gpus string
	gpuMemory, sysfs                string // the memory of a GPU whose memory nobody tells; the sysfs mount
	interval                        time.Duration
	metricsListen                   string // --metrics-listen; not a controller flag, but parsed with them
}

// agentConfig is the fleet agent's configuration, or ok false without
// --controller; backend is the GPU the daemon's backend drives
// (Daemon.DeclaredGPU).
func (c controllerFlags) agentConfig(cfg daemon.Config, backend gpuinv.Declared, log *slog.Logger) (fleetagent.Config, bool, error) {
	if c.url == "" {
		return fleetagent.Config{}, false, nil
	}
	gpus, err := c.inventory(backend, log)
	if err != nil {
		return fleetagent.Config{}, false, err
	}
	return fleetagent.Config{Controller: c.url, Token: c.token, Host: c.host, Address: c.address, Version: daemon.Version,
		GPUs: gpus, StatePath: filepath.Join(cfg.StateDir, "controller-agent.json"), Interval: c.interval, Log: log}, true, nil
}

// inventory is the GPU inventory reported to the controller: the GPUs the
// daemon drives, as its backend declares them (backend) or as the operator
// does (--controller-gpus MODEL:SIZE[@PCI_ADDRESS],...), merged with the PCI
// functions sysfs shows (fleetagent.Inventory): each declared GPU with its
// function's address, NUMA node, driver, IOMMU group and SR-IOV state where
// it has one (a simulated GPU has none), and its memory (else
// --controller-gpu-memory). A GPU function no backend drives is logged, not
// reported: nothing may be placed on it. An address the operator declared
// that sysfs does not show is an error; sysfs unreadable, or the backend's
// address not in it (a container), reports the declared GPUs without PCI
// data, logged.
func (c controllerFlags) inventory(backend gpuinv.Declared, log *slog.Logger) ([]controllerapi.GPUReport, error) {
	mem, err := fleetagent.ParseSize(c.gpuMemory)
	if err != nil {
		return nil, fmt.Errorf("--controller-gpu-memory: %w", err)
	}
	declared := []gpuinv.Declared{backend}
	if c.gpus != "" {
		if declared, err = fleetagent.ParseDeclared(c.gpus); err != nil {
			return nil, fmt.Errorf("--controller-gpus: %w", err)
		}
	}
	reports, unused, err := fleetagent.Inventory(declared, c.sysfs, mem)
	switch {
	case err != nil && c.gpus != "" && errors.Is(err, gpuinv.ErrNotFound):
		return nil, fmt.Errorf("--controller-gpus: %w", err)
	case err != nil:
		log.Warn("the GPU inventory has no PCI data", "sysfs", c.sysfs, "err", err)
		served := make([]gpuinv.Served, len(declared))
		for i, d := range declared {
			served[i] = gpuinv.Served{Declared: d}
		}
		reports = fleetagent.Reports(gpuinv.Merged{Served: served}, mem)
	}
	for i := range reports {
		if reports[i].MemoryBytes <= 0 {
			reports[i].MemoryBytes = mem
		}
	}
	for _, u := range unused {
		log.Info("a GPU no backend of this daemon drives is not reported", "pci", u.Address, "model", u.Model)
	}
	log.Info("GPU inventory", "gpus", len(reports), "unused", len(unused))
	return reports, nil
}
