package main

import (
	"log/slog"
	"net/http"

	"github.com/sluice-gpu/sluice/internal/metricsserve"
)

// serveMetrics serves GET /metrics on addr for a Prometheus server, without
// a token (keep addr on a trusted network), until the returned stop runs.
func serveMetrics(addr string, metrics http.Handler, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	return metricsserve.Serve(addr, mux, log)
}
