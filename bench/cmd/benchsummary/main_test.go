package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `{"Action":"output","Package":"github.com/sluice-gpu/sluice/x","Output":"BenchmarkA/vms=2-2   \t     100\t  12345 ns/op\t  4.50 sim-s/s\n"}
{"Action":"output","Package":"github.com/sluice-gpu/sluice/x","Output":"BenchmarkB-2   \t"}
{"Action":"output","Package":"github.com/sluice-gpu/sluice/y","Output":"noise\n"}
{"Action":"output","Package":"github.com/sluice-gpu/sluice/x","Output":"  10\t  99 ns/op\n"}
{"Action":"output","Package":"github.com/sluice-gpu/sluice/x","Output":"PASS\n"}
not json
{"Action":"pass","Package":"github.com/sluice-gpu/sluice/x"}
`
	rows, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].name != "BenchmarkB-2" || rows[1].metrics[0] != "99 ns/op" || rows[0].name != "BenchmarkA/vms=2-2" || rows[0].pkg != "x" ||
		strings.Join(rows[0].metrics, ";") != "12345 ns/op;4.50 sim-s/s" {
		t.Fatalf("rows = %+v", rows)
	}
	var b strings.Builder
	write(&b, rows)
	if !strings.Contains(b.String(), "| x | BenchmarkA/vms=2-2 | 12345 ns/op, 4.50 sim-s/s |") {
		t.Fatalf("table:\n%s", b.String())
	}
}
