package main

import (
	"log/slog"

	"github.com/sluice-gpu/sluice/internal/metricsserve"
	"github.com/sluice-gpu/sluice/mediator/internal/apiserver"
)

// serveMetrics serves GET /metrics on addr (TCP) for a Prometheus server,
// until the returned stop runs. The host API stays on its UNIX socket.
func serveMetrics(addr string, s apiserver.Service, log *slog.Logger) (stop func(), err error) {
	return metricsserve.Serve(addr, apiserver.MetricsHandler(s), log)
}
