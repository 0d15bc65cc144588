package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
	"github.com/sluice-gpu/sluice/guest-agent/workload"
	"github.com/sluice-gpu/sluice/vmm-plugin/ivshmem"
)

// goneBound is how soon a waiting agent must give up once its endpoint's
// connection closed: it notices at once, so this is only a guard against
// waiting for the work's own end (a minute here).
const goneBound = 10 * time.Second

// ended is how an agent's command line ended: its output and error.
type ended struct {
	out string
	err error
}

// agentAsync runs the agent's command line in a goroutine.
func agentAsync(t *testing.T, args ...string) <-chan ended {
	t.Helper()
	res := make(chan ended, 1)
	go func() {
		out, err := agent(t, args...)
		res <- ended{out, err}
	}()
	return res
}

// waitJoined waits until a guest joined srv.
func waitJoined(t *testing.T, srv *ivshmem.Server) {
	t.Helper()
	deadline := time.Now().Add(goneBound)
	for len(srv.Peers()) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not join the endpoint")
		}
		time.Sleep(time.Millisecond)
	}
}

// checkGone asserts that the agent ended with the mediator gone, after
// printing what it ran.
func checkGone(t *testing.T, res <-chan ended, want string) {
	t.Helper()
	var r ended
	select {
	case r = <-res:
	case <-time.After(goneBound):
		t.Fatalf("the agent still waits %v after its mediator went away", goneBound)
	}
	out, err := r.out, r.err
	if !errors.Is(err, sdk.ErrMediatorGone) || !strings.HasPrefix(err.Error(), "the mediator went away: ") || !strings.Contains(err.Error(), want) {
		t.Fatalf("agent error %v, want the mediator went away (%s)", err, want)
	}
	var th workload.ThrottleResult
	if jerr := json.Unmarshal([]byte(out), &th); jerr != nil || th.Errors != 0 {
		t.Fatalf("the agent's result %q (%v): want what it ran, no kernel errors", out, jerr)
	}
}

// A process guest waiting for its kernel gives up when the endpoint's
// connection closes (sluiced exited or was killed).
func TestAgentMediatorDisconnects(t *testing.T) {
	path, h, srv, _ := endpointOf(t, sdktest.Config{Layout: sdktest.SmallLayout()})
	h.Pause() // the kernel never completes
	res := agentAsync(t, "--endpoint", path, "run", "throttle", "--kernel", "1ms", "--depth", "1", "--duration", "1m", "--json")
	waitJoined(t, srv)
	time.Sleep(20 * time.Millisecond) // the agent is waiting for its kernel
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, res, ivshmem.ErrServerGone.Error())
}

// A guest whose mediator's heartbeat stops gives up after
// --mediator-timeout, although its connection stays (a device-mode guest
// has none to watch); one whose heartbeat never moved is not judged by it.
func TestAgentMediatorHeartbeatStops(t *testing.T) {
	path, h, srv, r := endpointOf(t, sdktest.Config{Layout: sdktest.SmallLayout()})
	h.Pause()
	res := agentAsync(t, "--endpoint", path, "--mediator-timeout", "300ms",
		"run", "throttle", "--kernel", "1ms", "--depth", "1", "--duration", "1m", "--json")
	waitJoined(t, srv)
	time.Sleep(400 * time.Millisecond)
	select {
	case r := <-res:
		t.Fatalf("the agent gave up on a heartbeat that never moved: %v", r.err)
	default:
	}
	r.Store64(abi.HdrHeartbeat, 1)
	checkGone(t, res, "heartbeat")
}
