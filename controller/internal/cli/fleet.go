package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-gpu/sluice/api/controllerapi"
	"github.com/sluice-gpu/sluice/internal/limitread"
)

// Environment variables of the controller connection.
const (
	ControllerEnv = "SLUICE_CONTROLLER"
	TokenEnv      = "SLUICE_TOKEN"
	ConfigEnv     = "SLUICE_CONFIG"
)

// fleetConn is how sluicectl reaches sluice-controller: flags, else the
// environment, else the config file.
type fleetConn struct {
	controller, token, config string
}

// addFleetFlags adds the controller connection's persistent flags.
func (a *app) addFleetFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&a.fleet.controller, "controller", "",
		"URL of sluice-controller, e.g. http://ctl:7070 (env "+ControllerEnv+", or controller: in the config file); vm create/list/get/set/delete then go to it")
	f.StringVar(&a.fleet.token, "token", "", "bearer token for the controller (env "+TokenEnv+", or token: in the config file)")
	f.StringVar(&a.fleet.config, "config", "", "config file with controller: and token: (env "+ConfigEnv+"; default $XDG_CONFIG_HOME/sluice/sluicectl.yaml, else ~/.config/sluice/sluicectl.yaml)")
}

// configFile is the YAML config file.
type configFile struct {
	Controller string `yaml:"controller"`
	Token      string `yaml:"token"`
}

// maxConfigFile bounds the config file (a few lines; --config /dev/zero
// must not read until memory runs out).
const maxConfigFile = 1 << 20

// resolveFleet fills the connection from the environment and the config
// file where no flag set it.
func (a *app) resolveFleet() error {
	c := &a.fleet
	if c.controller == "" {
		c.controller = a.opts.Getenv(ControllerEnv)
	}
	if c.token == "" {
		c.token = a.opts.Getenv(TokenEnv)
	}
	path, explicit := c.config, c.config != ""
	if path == "" {
		path, explicit = a.opts.Getenv(ConfigEnv), a.opts.Getenv(ConfigEnv) != ""
	}
	if path == "" {
		dir := a.opts.Getenv("XDG_CONFIG_HOME")
		if dir == "" {
			if home := a.opts.Getenv("HOME"); home != "" {
				dir = filepath.Join(home, ".config")
			}
		}
		if dir == "" {
			return nil
		}
		path = filepath.Join(dir, "sluice", "sluicectl.yaml")
	}
	b, err := limitread.File(path, maxConfigFile)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the config file: %w", err)
	}
	var cf configFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cf); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if c.controller == "" {
		c.controller = cf.Controller
	}
	if c.token == "" {
		c.token = cf.Token
	}
	return nil
}

// fleetMode reports whether a controller is configured.
func (a *app) fleetMode() bool { return a.fleet.controller != "" }

// fleetClient is the controller's client, with the token on every request.
func (a *app) fleetClient() (*controllerapi.ClientWithResponses, error) {
	if a.fleet.controller == "" {
		return nil, usageErrorf("this command talks to sluice-controller: give --controller URL (or %s, or controller: in the config file)", ControllerEnv)
	}
	if a.fleet.token == "" {
		return nil, usageErrorf("no token for the controller: give --token TOKEN (or %s, or token: in the config file)", TokenEnv)
	}
	token := a.fleet.token
	return controllerapi.NewClientWithResponses(strings.TrimRight(a.fleet.controller, "/"),
		controllerapi.WithHTTPClient(&http.Client{Timeout: time.Minute}),
		controllerapi.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
}

// controllerError is an error answer of the controller.
type controllerError struct {
	status int
	body   controllerapi.Error
}

func (e *controllerError) Error() string {
	msg := e.body.Message
	if e.body.Field != nil && *e.body.Field != "" && !strings.Contains(msg, *e.body.Field) {
		msg += " (field " + *e.body.Field + ")"
	}
	return fmt.Sprintf("%s: %s", e.body.Code, msg)
}

type apiResponse interface {
	StatusCode() int
	GetBody() []byte
}

// answer turns a controller response into its value or an error.
func answer[T any](res apiResponse, v *T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, fmt.Errorf("reaching the controller: %w", err)
	}
	if res.StatusCode()/100 != 2 {
		var e controllerapi.Error
		if json.Unmarshal(res.GetBody(), &e) == nil && e.Code != "" {
			return zero, &controllerError{status: res.StatusCode(), body: e}
		}
		return zero, fmt.Errorf("the controller answered %d: %s", res.StatusCode(), clean(strings.TrimSpace(string(res.GetBody()))))
	}
	if v == nil {
		return zero, nil
	}
	return *v, nil
}

// rawFlag remembers the text a flag was set with, so that a command's
// controller variant can parse it its own way.
type rawFlag struct {
	pflag.Value
	raw string
}

func (r *rawFlag) Set(s string) error {
	r.raw = s
	return r.Value.Set(s)
}

// recordRaw wraps the named flags of cmd in rawFlag and returns them.
func recordRaw(cmd *cobra.Command, names ...string) map[string]*rawFlag {
	out := map[string]*rawFlag{}
	for _, n := range names {
		if f := cmd.Flags().Lookup(n); f != nil {
			r := &rawFlag{Value: f.Value}
			f.Value = r
			out[n] = r
		}
	}
	return out
}

// parseTime reads a time flag: RFC 3339, a date (UTC midnight), or a
// duration before now ("24h").
func parseTime(flag, s string, now time.Time) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return &t, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		t := now.Add(-d).UTC()
		return &t, nil
	}
	return nil, usageErrorf("--%s %q: want an RFC 3339 time (2026-11-01T12:00:00Z), a date (2026-11-01) or a duration ago (24h)", flag, s)
}
