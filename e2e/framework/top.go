package framework

import (
	"bufio"
	"strings"
)

// TopRows returns the rows of the last frame `sluicectl top` printed, by VM
// name, each split into fields: the lines after the last header line (the
// one starting with "VM ") up to the next blank line.
func TopRows(out string) map[string][]string {
	rows := map[string][]string{}
	var in bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "VM":
			in = true
			clear(rows)
		case len(f) == 0:
			in = false
		case in:
			rows[f[0]] = f
		}
	}
	return rows
}
