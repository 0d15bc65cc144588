package sdktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
)

func TestDoorbellChecks(t *testing.T) {
	h := sdktest.Start(t, sdktest.Config{HostPeerID: 5, Layout: sdktest.SmallLayout()})
	if err := h.Doorbell(4, 0); !errors.Is(err, sdktest.ErrWrongPeer) {
		t.Errorf("doorbell to peer 4: %v, want ErrWrongPeer", err)
	}
	for _, v := range []int{-1, abi.Vectors(2)} {
		if err := h.Doorbell(5, v); err == nil {
			t.Errorf("doorbell vector %d accepted", v)
		}
	}
	if err := h.Doorbell(5, abi.ControlVector(2)); err != nil || h.Doorbells(abi.ControlVector(2)) != 1 {
		t.Errorf("control doorbell: %v, counted %d", err, h.Doorbells(abi.ControlVector(2)))
	}
	h.Close()
	if err := h.Doorbell(5, 0); !errors.Is(err, sdktest.ErrClosed) {
		t.Errorf("doorbell after Close: %v, want ErrClosed", err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestServeRegionSize(t *testing.T) {
	if _, err := sdktest.Serve(make([]byte, 4096), sdktest.Config{}); err == nil {
		t.Error("Serve on a region smaller than the layout succeeded")
	}
	if _, err := sdktest.New(sdktest.Config{Layout: abi.LayoutConfig{RegionSize: 3}}); err == nil {
		t.Error("impossible layout accepted")
	}
}

// Serve writes a header the SDK accepts into a region it is given, and
// Kick serves it without a doorbell through the Host.
func TestServeAndKick(t *testing.T) {
	l, _ := abi.NewLayout(sdktest.SmallLayout())
	mem := make([]byte, l.RegionSize)
	h, err := sdktest.Serve(mem, sdktest.Config{Layout: sdktest.SmallLayout()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	d, err := sdk.Open(kickless{h, mem})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := d.Channel(0)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	last, err := c.Submit(ctx, abi.Command{Op: abi.OpFence, Value: 3})
	if err != nil {
		t.Fatal(err)
	}
	h.Kick()
	if err := c.Wait(ctx, last); err != nil || c.Fence() != 3 {
		t.Fatalf("Wait: %v, fence %d", err, c.Fence())
	}
}

// kickless is a transport whose doorbell goes nowhere.
type kickless struct {
	h   *sdktest.Host
	mem []byte
}

func (k kickless) Region() []byte             { return k.mem }
func (k kickless) Doorbell(uint16, int) error { return nil }
func (k kickless) Close() error               { return k.h.Close() }
