package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-gpu/sluice/guest-agent/control"
)

// version is stamped by the Makefile (-X main.version=...).
var version = "dev"

func newServeCmd(g *globals) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve workload requests from the host over a control port (the guest image runs this)",
		Long: `Open the control port (by default the VM's second serial port, /dev/ttyS1,
which the host connects to a UNIX socket) and run the agent commands the host
asks for, one at a time, answering each with its exit status and output
("sluicectl vm exec NAME -- run throttle ..." sends them). The global flags
given to serve (--device, polling) apply to every request.

The protocol is line-delimited JSON (package guest-agent/control). serve
returns when the port closes or the agent is told to stop (SIGTERM, e.g. from
the guest's power button).`,
		Example: `  sluice-agent --device serve
  sluice-agent --device serve --control /dev/ttyS1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			port, err := openControl(path)
			if err != nil {
				return err
			}
			defer port.Close()
			return serve(cmd.Context(), port, port, globalArgs(cmd.Root().PersistentFlags()))
		},
	}
	cmd.Flags().StringVar(&path, "control", "/dev/ttyS1", "control port: a serial tty (set to raw mode) or any stream file")
	return cmd
}

// globalArgs repeats the root flags serve was given, for each request.
func globalArgs(fs *pflag.FlagSet) []string {
	var args []string
	// Changed, not Visit: cobra parses a subcommand's flags in a merged set,
	// which shares the *Flag but not the parent set's record of what was set.
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// serve answers requests from r on w until r ends or ctx is done.
func serve(ctx context.Context, r io.Reader, w io.Writer, base []string) error {
	send := func(m control.Message) error {
		b, err := control.Encode(m)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("writing to the control port: %w", err)
		}
		return nil
	}
	if err := send(control.Message{Kind: control.KindHello, Agent: "sluice-agent " + version}); err != nil {
		return err
	}
	msgs := make(chan control.Message)
	done := make(chan error, 1)
	go func() {
		cr := control.NewReader(r)
		for {
			m, err := cr.Next()
			if control.Skippable(err) {
				continue // noise on the line, or a host attaching mid-line
			}
			if err != nil {
				done <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading the control port: %w", err)
		case m := <-msgs:
			var err error
			switch m.Kind {
			case control.KindHello:
				err = send(control.Message{Kind: control.KindHello, Agent: "sluice-agent " + version})
			case control.KindRequest:
				err = send(runRequest(ctx, base, m))
			}
			if err != nil {
				return err
			}
		}
	}
}

// runRequest runs one agent command line as if given to sluice-agent.
func runRequest(ctx context.Context, base []string, req control.Message) control.Message {
	resp := control.Message{Kind: control.KindResponse, ID: req.ID}
	if req.Args[0] == "serve" {
		resp.Exit, resp.Stderr = 2, "sluice-agent: serve cannot be requested through serve\n"
		return resp
	}
	var out, errOut bytes.Buffer
	root := newRootCmd(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(append([]string(nil), base...), req.Args...))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(&errOut, "sluice-agent: %v\n", err)
		resp.Exit = 1
	}
	resp.Stdout, resp.Stderr = out.String(), errOut.String()
	// Keep the response within a line: a result this large is a bug, but
	// the host must still get an answer.
	if n := len(resp.Stdout) + len(resp.Stderr); n > control.MaxLine/2 {
		resp.Stdout = ""
		resp.Stderr = fmt.Sprintf("sluice-agent: output of %d bytes is too large for the control port\n", n)
		resp.Exit = 1
	}
	return resp
}

// openControl opens the control port; a tty is put in raw mode so the line
// discipline neither echoes nor rewrites the bytes.
func openControl(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the control port: %w", err)
	}
	if err := makeRaw(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("control port %s: %w", path, err)
	}
	return f, nil
}
