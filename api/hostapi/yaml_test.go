package hostapi

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// readYAML reads the YAML subset openapi.yaml is written in into
// map[string]any, []any and string values: block mappings and sequences,
// plain and quoted scalars, | and > block scalars, comments. Anything else
// (flow collections, anchors, tags, multi-document streams) is an error, so
// the spec cannot drift into YAML this reader would misread. It exists
// because the module takes no YAML dependency.
func readYAML(src string) (any, error) {
	p := &yamlReader{lines: strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")}
	p.skip()
	if p.i >= len(p.lines) {
		return nil, fmt.Errorf("empty document")
	}
	v, err := p.node(p.indent())
	if err != nil {
		return nil, err
	}
	if p.skip(); p.i < len(p.lines) {
		return nil, p.errf("unexpected indentation")
	}
	return v, nil
}

type yamlReader struct {
	lines []string
	i     int
}

func (p *yamlReader) errf(format string, a ...any) error {
	return fmt.Errorf("line %d: %s", p.i+1, fmt.Sprintf(format, a...))
}

// skip moves past blank and comment-only lines.
func (p *yamlReader) skip() {
	for p.i < len(p.lines) {
		t := strings.TrimSpace(p.lines[p.i])
		if t != "" && !strings.HasPrefix(t, "#") {
			return
		}
		p.i++
	}
}

func (p *yamlReader) indent() int {
	l := p.lines[p.i]
	return len(l) - len(strings.TrimLeft(l, " "))
}

func (p *yamlReader) text() string { return strings.TrimSpace(p.lines[p.i]) }

func isSeqItem(t string) bool { return t == "-" || strings.HasPrefix(t, "- ") }

func (p *yamlReader) node(ind int) (any, error) {
	if strings.HasPrefix(strings.TrimLeft(p.lines[p.i], " "), "\t") {
		return nil, p.errf("tab indentation")
	}
	if isSeqItem(p.text()) {
		return p.seq(ind)
	}
	return p.mapping(ind)
}

func (p *yamlReader) mapping(ind int) (map[string]any, error) {
	m := map[string]any{}
	for p.skip(); p.i < len(p.lines) && p.indent() == ind; p.skip() {
		t := p.text()
		if isSeqItem(t) {
			return nil, p.errf("sequence item in a mapping")
		}
		key, rest, err := splitKey(t)
		if err != nil {
			return nil, p.errf("%v", err)
		}
		if _, dup := m[key]; dup {
			return nil, p.errf("duplicate key %q", key)
		}
		v, err := p.value(ind, rest)
		if err != nil {
			return nil, err
		}
		m[key] = v
	}
	return m, nil
}

func (p *yamlReader) seq(ind int) ([]any, error) {
	var s []any
	for p.skip(); p.i < len(p.lines) && p.indent() == ind && isSeqItem(p.text()); p.skip() {
		rest := strings.TrimSpace(strings.TrimPrefix(p.text(), "-"))
		if rest == "" {
			p.i++
			if p.skip(); p.i >= len(p.lines) || p.indent() <= ind {
				return nil, p.errf("empty sequence item")
			}
			v, err := p.node(p.indent())
			if err != nil {
				return nil, err
			}
			s = append(s, v)
			continue
		}
		if _, _, err := splitKey(rest); err == nil {
			// "- key: value" opens a mapping indented past the dash.
			p.lines[p.i] = strings.Repeat(" ", ind+2) + rest
			v, err := p.mapping(ind + 2)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
			continue
		}
		v, err := scalar(rest)
		if err != nil {
			return nil, p.errf("%v", err)
		}
		p.i++
		s = append(s, v)
	}
	return s, nil
}

// value reads what follows "key:" on the line at p.i, indented ind.
func (p *yamlReader) value(ind int, rest string) (any, error) {
	switch {
	case rest == "":
		p.i++
		if p.skip(); p.i >= len(p.lines) || p.indent() <= ind {
			return nil, p.errf("key without a value")
		}
		return p.node(p.indent())
	case strings.TrimRight(rest, "-+") == "|" || strings.TrimRight(rest, "-+") == ">":
		p.i++
		return p.block(ind, rest[0] == '>'), nil
	}
	v, err := scalar(rest)
	if err != nil {
		return nil, p.errf("%v", err)
	}
	p.i++
	return v, nil
}

// block reads a block scalar's lines: those indented past ind, and blank
// lines among them.
func (p *yamlReader) block(ind int, fold bool) string {
	var out []string
	base := -1
	for ; p.i < len(p.lines); p.i++ {
		l := p.lines[p.i]
		if strings.TrimSpace(l) == "" {
			out = append(out, "")
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if n <= ind {
			break
		}
		if base < 0 {
			base = n
		}
		out = append(out, l[min(base, n):])
	}
	sep := "\n"
	if fold {
		sep = " "
	}
	return strings.TrimRight(strings.Join(out, sep), " \n") + "\n"
}

// splitKey splits "key: value" or "key:" into key and value.
func splitKey(t string) (key, rest string, err error) {
	if t[0] == '"' || t[0] == '\'' {
		end := strings.IndexByte(t[1:], t[0])
		if end < 0 {
			return "", "", fmt.Errorf("unterminated quoted key")
		}
		key, after := t[1:end+1], t[end+2:]
		if after != ":" && !strings.HasPrefix(after, ": ") {
			return "", "", fmt.Errorf("no ':' after quoted key")
		}
		return key, strings.TrimSpace(strings.TrimPrefix(after, ":")), nil
	}
	if i := strings.Index(t, ": "); i >= 0 {
		return t[:i], strings.TrimSpace(t[i+2:]), nil
	}
	if strings.HasSuffix(t, ":") {
		return t[:len(t)-1], "", nil
	}
	return "", "", fmt.Errorf("not a key")
}

func scalar(s string) (string, error) {
	switch s[0] {
	case '"':
		if len(s) < 2 || s[len(s)-1] != '"' || strings.Contains(s, `\`) {
			return "", fmt.Errorf("double-quoted scalar %s: unterminated or escaped", s)
		}
		return s[1 : len(s)-1], nil
	case '\'':
		if len(s) < 2 || s[len(s)-1] != '\'' {
			return "", fmt.Errorf("single-quoted scalar %s: unterminated", s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case '[', '{', '&', '*', '!', '|', '>', '%', '@', '`', '#':
		return "", fmt.Errorf("scalar %s: flow collections, anchors, tags and reserved indicators are not supported", s)
	}
	if i := strings.Index(s, " #"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if strings.Contains(s, ": ") {
		return "", fmt.Errorf("plain scalar %q holds ': '", s)
	}
	return s, nil
}

func TestReadYAML(t *testing.T) {
	src := `# comment
a: 1
b:
  c: "x: y"
  'd e': it's
  f:
    - one
    - k: v
      l: w
    -
      m: n
g: |
  first

  second
h: >-
  folded
  text
i: plain # trailing comment
`
	got, err := readYAML(src)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": "1",
		"b": map[string]any{
			"c":   "x: y",
			"d e": "it's",
			"f":   []any{"one", map[string]any{"k": "v", "l": "w"}, map[string]any{"m": "n"}},
		},
		"g": "first\n\nsecond\n",
		"h": "folded text\n",
		"i": "plain",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("readYAML:\n got %#v\nwant %#v", got, want)
	}
}

func TestReadYAMLRejects(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"flow sequence", "a: [1, 2]\n"},
		{"flow mapping", "a: {b: c}\n"},
		{"anchor", "a: &x 1\n"},
		{"duplicate key", "a: 1\na: 2\n"},
		{"bad dedent", "a:\n    b: 1\n  c: 2\n"},
		{"colon in plain scalar", "a: b: c\n"},
		{"key without value", "a:\nb: 1\n"},
		{"not a key", "a: 1\nb\n"},
		{"unterminated quote", "a: \"b\n"},
		{"empty", "# nothing\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v, err := readYAML(tc.src); err == nil {
				t.Fatalf("readYAML(%q) = %#v, want an error", tc.src, v)
			}
		})
	}
}

func FuzzReadYAML(f *testing.F) {
	f.Add("a: 1\nb:\n  - c\n  - d: e\n")
	f.Add("a: |\n  x\n\n  y\nb: '1'\n")
	f.Add("- a\n-\n  b: c\n")
	f.Add("a:\n\t- b\n")
	f.Fuzz(func(t *testing.T, src string) {
		_, _ = readYAML(src) // must not panic or hang
	})
}
