package null

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
	"github.com/sluice-gpu/sluice/mediator/backend"
)

func TestNull(t *testing.T) {
	b, err := backend.Open("null", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	got := make(chan backend.Completion, 16)
	v, err := b.Attach(backend.VMSpec{ID: 1, Channels: 2, Complete: func(c backend.Completion) { got <- c }})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		op   abi.Opcode
		code abi.ErrorCode
	}{
		{abi.OpNop, abi.OK},
		{abi.OpFence, abi.OK},
		{abi.OpThrottle, abi.ErrUnsupported},
		{abi.OpAlloc, abi.ErrUnsupported},
		{abi.OpCopy, abi.ErrUnsupported},
		{abi.OpLaunch, abi.ErrUnsupported},
	}
	for i, tc := range cases {
		before := b.Clock().Now()
		if err := v.Submit(i%2, abi.Command{Op: tc.op}, uint64(i)); err != nil {
			t.Fatal(err)
		}
		var c backend.Completion
		select {
		case c = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no completion")
		}
		if c.Op != tc.op || c.Code != tc.code || c.Tag != uint64(i) || c.Channel != i%2 {
			t.Errorf("%v: got %+v, want code %v", tc.op, c, tc.code)
		}
		if tc.code == abi.OK && (c.Start != c.End || c.Start < before) {
			t.Errorf("%v: Start %d End %d, submitted at %d", tc.op, c.Start, c.End, before)
		}
		if tc.code != abi.OK && (c.Start != 0 || c.End != 0) {
			t.Errorf("%v: failed command has times %d..%d", tc.op, c.Start, c.End)
		}
	}
	if err := v.Submit(2, abi.Command{Op: abi.OpNop}, 0); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("bad channel: %v", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Submit(0, abi.Command{Op: abi.OpNop}, 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestNullOptions(t *testing.T) {
	for _, o := range []backend.Options{{Clock: "virtual"}, {Params: map[string]string{"x": "1"}}} {
		if _, err := backend.Open("null", o); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
