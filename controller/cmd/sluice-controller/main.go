// Command sluice-controller is the operators' controller of a fleet of
// sluiced hosts: it serves the REST API of api/controllerapi (hosts, GPUs,
// VMs and their placement, usage, tokens, the audit log) over HTTP from a
// SQLite database, or from a PostgreSQL one that several controllers behind
// one address share. Its version is set with -ldflags "-X main.version=...".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-gpu/sluice/controller/internal/auth"
	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/placement"
	"github.com/sluice-gpu/sluice/controller/internal/server"
	"github.com/sluice-gpu/sluice/controller/internal/store/postgres"
	"github.com/sluice-gpu/sluice/controller/internal/store/sqlite"
	"github.com/sluice-gpu/sluice/internal/cmdline"
)

var version = "dev"

const longHelp = `sluice-controller is the operators' controller of a Sluice fleet.

It serves the controller's REST API (api/controllerapi/openapi.yaml) on
--listen: hosts running sluiced register and heartbeat with host tokens,
operators and tenants manage VMs, which it places on GPUs with room, and
usage intervals pushed by the hosts are kept as billing data. Every request
needs a bearer token; --bootstrap-token creates the first operator token on
an empty database (sluicectl --controller URL --token T token create makes
the others). sluicectl talks to it with --controller URL --token TOKEN.

Environment (defaults of the flags named; flags win):
  SLUICE_CONTROLLER_LISTEN           --listen
  SLUICE_CONTROLLER_DB               --db
  SLUICE_CONTROLLER_BOOTSTRAP_TOKEN  --bootstrap-token (keeps the token
                                     out of the process list)

Durations are Go durations: 500ms, 30s, 2m.
Exit status: 0 after a clean stop, 1 when the controller failed, 2 on a bad
command line.`

const examples = `  sluice-controller --listen 127.0.0.1:7070 --db sqlite:/var/lib/sluice/controller.db --bootstrap-token "$(cat /etc/sluice/op-token)"
  sluice-controller --listen :7443 --tls-cert cert.pem --tls-key key.pem --placement pack
  sluice-controller --listen :7070 --db 'postgres://sluice@db.example/sluice?sslmode=verify-full'`

// config is what the flags say.
type config struct {
	listen, db, bootstrap, tlsCert, tlsKey string
	metricsListen                          string
	heartbeatTimeout                       time.Duration
	placement                              placement.Policy
	maxVMsPerGPU                           int
	logLevel                               slog.Level
	policy, level                          string // --placement and --log-level as given
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// run runs the controller until ctx ends. ready, if not nil, gets the
// address it listens on.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) int {
	cfg := &config{}
	root := cmdline.NewRoot(&cobra.Command{
		Use:     "sluice-controller",
		Short:   "The operators' controller of a Sluice fleet",
		Long:    longHelp,
		Example: examples,
		RunE: cmdline.Checked(func(*pflag.FlagSet) error { return cfg.finish() }, func(ctx context.Context) error {
			log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
			if err := serve(ctx, *cfg, log, ready); err != nil {
				log.Error("stopped", "err", err)
				return cmdline.ExitCode(cmdline.ExitError)
			}
			return nil
		}),
	}, version)
	cfg.addFlags(root.Flags(), os.Getenv)
	return cmdline.Execute(ctx, root, args, stdout, stderr)
}

// addFlags declares the controller's flags, a line each.
func (cfg *config) addFlags(fs *pflag.FlagSet, getenv func(string) string) {
	env := func(key, def string) string { return cmdline.Env(getenv, key, def) }
	fs.SortFlags = false
	fs.StringVar(&cfg.listen, "listen", env("SLUICE_CONTROLLER_LISTEN", "127.0.0.1:7070"), "address to serve the API on (host:port) (env SLUICE_CONTROLLER_LISTEN)")
	fs.StringVar(&cfg.db, "db", env("SLUICE_CONTROLLER_DB", "sqlite:sluice-controller.db"), "database: sqlite:PATH, or postgres://USER@HOST/DB?... (PostgreSQL, which several controllers behind one address may share) (env SLUICE_CONTROLLER_DB)")
	fs.StringVar(&cfg.bootstrap, "bootstrap-token", env("SLUICE_CONTROLLER_BOOTSTRAP_TOKEN", ""), "on an empty database, create an operator token with this secret (at least 16 characters); ignored once tokens exist (env SLUICE_CONTROLLER_BOOTSTRAP_TOKEN)")
	fs.StringVar(&cfg.metricsListen, "metrics-listen", "", "also serve GET /metrics (Prometheus, no token) on this address (host:port); default none")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; needs --tls-key)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.DurationVar(&cfg.heartbeatTimeout, "heartbeat-timeout", server.DefaultHeartbeatTimeout, "a host silent this long is marked down and its VMs flagged")
	fs.StringVar(&cfg.policy, "placement", string(placement.Spread), "default placement policy: spread (fewest VMs per GPU) or pack (fill GPUs one by one)")
	fs.IntVar(&cfg.maxVMsPerGPU, "max-vms-per-gpu", server.DefaultMaxVMsPerGPU, "most VMs placed on one GPU")
	fs.StringVar(&cfg.level, "log-level", "info", "log level: debug, info, warn, error")
}

// finish converts and checks what the flags said.
func (cfg *config) finish() error {
	var err error
	if cfg.placement, err = placement.Parse(cfg.policy); err != nil {
		return fmt.Errorf("--placement: %w", err)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if cfg.bootstrap != "" && len(cfg.bootstrap) < 16 {
		return errors.New("--bootstrap-token: at least 16 characters")
	}
	if cfg.heartbeatTimeout < time.Second {
		return errors.New("--heartbeat-timeout: at least 1s")
	}
	if cfg.maxVMsPerGPU < 1 {
		return errors.New("--max-vms-per-gpu: at least 1")
	}
	if _, err := parseDB(cfg.db); err != nil {
		return err
	}
	if err := cfg.logLevel.UnmarshalText([]byte(cfg.level)); err != nil {
		return fmt.Errorf("--log-level %q: %w", cfg.level, err)
	}
	return nil
}

// dbSpec is a parsed --db: a SQLite file or a PostgreSQL URL.
type dbSpec struct{ sqlite, postgres string }

// parseDB parses --db: sqlite:PATH or postgres://... (postgresql://...).
func parseDB(db string) (dbSpec, error) {
	switch {
	case strings.HasPrefix(db, "sqlite:") && len(db) > len("sqlite:"):
		return dbSpec{sqlite: strings.TrimPrefix(db, "sqlite:")}, nil
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		if _, err := url.Parse(db); err != nil {
			return dbSpec{}, fmt.Errorf("--db: %w", err)
		}
		return dbSpec{postgres: db}, nil
	}
	return dbSpec{}, fmt.Errorf("--db %q: want sqlite:PATH or a postgres:// URL", db)
}

// store is what serve needs of either store.
type store interface {
	server.Store
	tokenStore
	Close() error
}

func openStore(ctx context.Context, db dbSpec) (store, error) {
	if db.postgres != "" {
		return postgres.Open(ctx, db.postgres)
	}
	return sqlite.Open(ctx, db.sqlite)
}

func serve(ctx context.Context, cfg config, log *slog.Logger, ready chan<- string) error {
	spec, _ := parseDB(cfg.db)
	st, err := openStore(ctx, spec)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := bootstrap(ctx, st, cfg.bootstrap, time.Now().UTC(), log); err != nil {
		return err
	}
	srv, err := server.New(server.Config{Store: st, HeartbeatTimeout: cfg.heartbeatTimeout, MaxVMsPerGPU: cfg.maxVMsPerGPU,
		Placement: cfg.placement, Version: version, Log: log})
	if err != nil {
		return err
	}
	if cfg.metricsListen != "" {
		stopMetrics, err := serveMetrics(cfg.metricsListen, srv.Metrics().Handler(), log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.listen, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(runCtx)
	errc := make(chan error, 1)
	go func() {
		if cfg.tlsCert != "" {
			errc <- hs.ServeTLS(ln, cfg.tlsCert, cfg.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	log.Info("serving", "addr", ln.Addr().String(), "db", redact(cfg.db), "tls", cfg.tlsCert != "", "version", version)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := hs.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// tokenStore is what bootstrap needs.
type tokenStore interface {
	CountTokens(ctx context.Context) (int, error)
	CreateToken(ctx context.Context, t fleet.Token, ev fleet.Event) error
}

// bootstrap creates the operator token "bootstrap" with secret on a store
// without tokens; with tokens there already, it only says it did nothing.
func bootstrap(ctx context.Context, st tokenStore, secret string, now time.Time, log *slog.Logger) error {
	if secret == "" {
		return nil
	}
	n, err := st.CountTokens(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		log.Info("--bootstrap-token ignored: the database has tokens already", "tokens", n)
		return nil
	}
	id, err := auth.NewID()
	if err != nil {
		return err
	}
	t := fleet.Token{ID: id, Name: "bootstrap", Role: fleet.RoleOperator, Hash: auth.Hash(secret), Created: now, CreatedBy: "--bootstrap-token"}
	ev := fleet.Event{Time: now, Actor: "--bootstrap-token", Action: "token.create", Target: id, Detail: `name "bootstrap", role operator`}
	if err := st.CreateToken(ctx, t, ev); err != nil {
		// Another controller on a shared database may have bootstrapped
		// it at the same moment: then there is nothing left to do.
		if n, cerr := st.CountTokens(ctx); cerr == nil && n > 0 {
			log.Info("--bootstrap-token ignored: another controller created the tokens", "tokens", n)
			return nil
		}
		return fmt.Errorf("creating the bootstrap token: %w", err)
	}
	log.Info("created the bootstrap operator token", "id", id)
	return nil
}

// redact is a --db for the log: a PostgreSQL URL without its password.
func redact(db string) string {
	u, err := url.Parse(db)
	if err != nil || u.User == nil {
		return db
	}
	return u.Redacted()
}
