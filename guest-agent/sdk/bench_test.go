package sdk_test

import (
	"testing"

	"github.com/sluice-gpu/sluice/guest-agent/sdk/sdktest"
)

// BenchmarkRoundTrip is one NOP submitted and waited for, against the
// in-process fake host (doorbell = a channel send to its goroutine).
func BenchmarkRoundTrip(b *testing.B) {
	_, d := sdktest.Open(b, sdktest.Config{})
	c, err := d.Channel(0)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	for b.Loop() {
		last, err := c.Submit(ctx, nop())
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Wait(ctx, last); err != nil {
			b.Fatal(err)
		}
	}
}
