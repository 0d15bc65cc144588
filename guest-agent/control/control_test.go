package control_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sluice-gpu/sluice/guest-agent/control"
)

func TestRoundTrip(t *testing.T) {
	msgs := []control.Message{
		{Kind: control.KindHello, Agent: "sluice-agent dev"},
		{Kind: control.KindRequest, ID: 7, Args: []string{"run", "throttle", "--json"}},
		{Kind: control.KindResponse, ID: 7, Exit: 1, Stdout: "{\n}\n", Stderr: "boom\n"},
	}
	var stream strings.Builder
	for _, m := range msgs {
		b, err := control.Encode(m)
		if err != nil {
			t.Fatalf("encode %+v: %v", m, err)
		}
		stream.Write(b)
	}
	r := control.NewReader(strings.NewReader(stream.String()))
	for i, want := range msgs {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want.V = control.Version
		if got.Kind != want.Kind || got.ID != want.ID || got.Exit != want.Exit || got.Stdout != want.Stdout ||
			got.Stderr != want.Stderr || got.Agent != want.Agent || strings.Join(got.Args, " ") != strings.Join(want.Args, " ") {
			t.Errorf("message %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last message: %v, want EOF", err)
	}
}

func TestReaderSkipsBadLines(t *testing.T) {
	hello, _ := control.Encode(control.Message{Kind: control.KindHello})
	long := strings.Repeat("x", control.MaxLine+10) + "\n"
	stream := "garbage\n" + `{"v":2,"kind":"hello"}` + "\n" + long + `{"v":1,"kind":"request","id":0,"args":["x"]}` + "\n" + string(hello)
	r := control.NewReader(strings.NewReader(stream))
	for i := 0; i < 4; i++ {
		_, err := r.Next()
		if !control.Skippable(err) {
			t.Fatalf("line %d: %v, want a skippable error", i, err)
		}
	}
	m, err := r.Next()
	if err != nil || m.Kind != control.KindHello {
		t.Fatalf("after bad lines: %+v, %v", m, err)
	}
}

func TestValidate(t *testing.T) {
	bad := []string{
		`{"v":1,"kind":"request","id":1}`,
		`{"v":1,"kind":"request","id":1,"args":[]}`,
		`{"v":1,"kind":"response","id":0}`,
		`{"v":1,"kind":"response","id":3,"exit":-1}`,
		`{"v":1,"kind":"response","id":3,"exit":256}`,
		`{"v":1,"kind":"what"}`,
		`{"v":1,"kind":"hello","extra":1}`,
		`{"v":1,"kind":"hello"} {}`,
	}
	for _, s := range bad {
		if _, err := control.Decode([]byte(s)); !errors.Is(err, control.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", s, err)
		}
	}
	if _, err := control.Encode(control.Message{Kind: control.KindRequest, ID: 1, Args: make([]string, control.MaxArgs+1)}); err == nil {
		t.Error("a request over MaxArgs encoded")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"hello","agent":"x"}`))
	f.Add([]byte(`{"v":1,"kind":"request","id":1,"args":["run"]}`))
	f.Add([]byte(`{"v":1,"kind":"response","id":1,"exit":0,"stdout":"{}"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := control.Decode(line)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded message fails validation: %v", err)
		}
		b, err := control.Encode(m)
		if err != nil {
			t.Fatalf("re-encoding a decoded message: %v", err)
		}
		if _, err := control.Decode(b[:len(b)-1]); err != nil {
			t.Fatalf("decoding a re-encoded message: %v", err)
		}
	})
}
