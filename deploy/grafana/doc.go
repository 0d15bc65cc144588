// Package grafana holds Sluice's Grafana dashboard, sluice.json (import it
// in Grafana with a Prometheus data source that scrapes sluice-controller
// and every sluiced through their --metrics-listen). Its test checks that
// every PromQL expression names only metrics that the real registries of
// sluiced (internal/hostmetrics) and the controller (internal/ctlmetrics)
// produce.
package grafana
