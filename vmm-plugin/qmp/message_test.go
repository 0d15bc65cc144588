package qmp

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDecodeMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want func(message) bool
	}{
		{"greeting", `{"QMP":{"version":{"qemu":{"micro":22,"minor":2,"major":7},"package":"Debian"},"capabilities":["oob"]}}`,
			func(m message) bool {
				g := m.greeting
				return m.kind == kindGreeting && g.Version == (Version{7, 2, 22}) && g.Package == "Debian" &&
					len(g.Capabilities) == 1 && g.Version.String() == "7.2.22"
			}},
		{"return", `{"return":{"a":1},"id":7}`, func(m message) bool {
			return m.kind == kindReply && m.idKind == idOurs && m.id == 7 && string(m.ret) == `{"a":1}` && m.err == nil
		}},
		{"empty return", ` {"return": {}, "id": 1}` + "\r\n", func(m message) bool {
			return m.kind == kindReply && string(m.ret) == `{}`
		}},
		{"error", `{"error":{"class":"GenericError","desc":"no"},"id":2}`, func(m message) bool {
			return m.kind == kindReply && m.id == 2 && m.err != nil && *m.err == Error{Class: "GenericError", Desc: "no"}
		}},
		{"error without id", `{"error":{"class":"GenericError","desc":"JSON parse error"}}`, func(m message) bool {
			return m.kind == kindReply && m.idKind == idNone
		}},
		{"foreign id", `{"return":{},"id":"x"}`, func(m message) bool { return m.idKind == idForeign }},
		{"negative id", `{"return":{},"id":-1}`, func(m message) bool { return m.idKind == idForeign }},
		{"event", `{"event":"SHUTDOWN","data":{"guest":true},"timestamp":{"seconds":1700000000,"microseconds":5}}`,
			func(m message) bool {
				e := m.event
				return m.kind == kindEvent && e.Name == "SHUTDOWN" && string(e.Data) == `{"guest":true}` &&
					e.Timestamp.Equal(time.Unix(1700000000, 5000))
			}},
		{"event without clock", `{"event":"STOP","timestamp":{"seconds":-1,"microseconds":-1}}`, func(m message) bool {
			return m.kind == kindEvent && m.event.Timestamp.IsZero() && m.event.Data == nil
		}},
		{"not an object", `[1]`, nil},
		{"empty object", `{}`, nil},
		{"wrong types", `{"return":{},"id":1,"error":"x"}`, nil},
		{"bad json", `{"return":`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeMessage([]byte(tc.in))
			if tc.want == nil {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", m)
				}
				return
			}
			if err != nil || !tc.want(m) {
				t.Fatalf("decodeMessage() = %+v, %v", m, err)
			}
		})
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"QMP":{"version":{"qemu":{"micro":22,"minor":2,"major":7},"package":""},"capabilities":["oob"]}}`,
		`{"return":{},"id":1}`,
		`{"return":[{"a":null}],"id":18446744073709551615}`,
		`{"error":{"class":"GenericError","desc":"x"}}`,
		`{"event":"SHUTDOWN","data":{"guest":false},"timestamp":{"seconds":1,"microseconds":2}}`,
		`{"event":"X","timestamp":{"seconds":9223372036854775807,"microseconds":9223372036854775807}}`,
		`{"QMP":null,"event":null,"return":null}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		switch m.kind {
		case kindGreeting, kindEvent:
		case kindReply:
			if (m.err == nil) == (m.ret == nil) {
				t.Fatalf("reply with both or neither of return and error: %+v", m)
			}
		default:
			t.Fatalf("no kind: %+v", m)
		}
		if !json.Valid(b) {
			t.Fatalf("invalid JSON %q decoded", b)
		}
	})
}

func TestEncodeArgs(t *testing.T) {
	var nilMap map[string]int
	for _, tc := range []struct {
		in      any
		want    string
		wantErr bool
	}{
		{nil, "", false},
		{nilMap, "", false},
		{map[string]int{"a": 1}, `{"a":1}`, false},
		{json.RawMessage(`{"b":2}`), `{"b":2}`, false},
		{[]int{1}, "", true},
		{"s", "", true},
		{make(chan int), "", true},
	} {
		got, err := encodeArgs(tc.in)
		if string(got) != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("encodeArgs(%#v) = %s, %v", tc.in, got, err)
		}
	}
}
