package sdktest

import (
	"testing"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/guest-agent/sdk"
)

// Start starts a fake host that t's cleanup closes.
func Start(t testing.TB, cfg Config) *Host {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Open starts a fake host and opens a Device on it; t's cleanup closes both.
func Open(t testing.TB, cfg Config, opts ...sdk.Option) (*Host, *sdk.Device) {
	t.Helper()
	h := Start(t, cfg)
	d, err := sdk.Open(h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return h, d
}

// FailAt is a Handler that fails record idx of channel ch with code and runs
// every other record with DefaultHandler.
func FailAt(ch, idx uint32, code abi.ErrorCode) Handler {
	return func(c, i uint32, cmd abi.Command) abi.ErrorCode {
		if c == ch && i == idx {
			return code
		}
		return DefaultHandler(c, i, cmd)
	}
}

// SmallLayout is a 64 KiB region with 2 channels of 8 records, for tests of
// ring wrap-around and ring-full waits.
func SmallLayout() abi.LayoutConfig {
	return abi.LayoutConfig{RegionSize: abi.MinRegionSize, Channels: 2, RingEntries: abi.MinRingEntries}
}
