package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Parse reads a spec, applies defaults for keys left out and validates it. Every problem found (unknown keys,
// bad values, ...) is reported in one error that matches ErrInvalid, each naming its key path and line.
func Parse(data []byte) (Spec, error) {
	root, err := decodeDocument(data)
	if err != nil {
		return Spec{}, err
	}
	p := newProblems(map[string]int{})
	s := Spec{
		Backend:    DefaultBackend,
		Clock:      DefaultClock,
		Policy:     DefaultPolicy,
		Accounting: DefaultAccounting,
		Seed:       DefaultSeed,
	}
	p.mapping(root, "", []field{
		{"backend", func(n *yaml.Node, path string) { stringValue(p, n, path, &s.Backend) }},
		{"clock", func(n *yaml.Node, path string) { stringValue(p, n, path, &s.Clock) }},
		{"policy", func(n *yaml.Node, path string) { stringValue(p, n, path, &s.Policy) }},
		{"accounting", func(n *yaml.Node, path string) { stringValue(p, n, path, &s.Accounting) }},
		{"duration", func(n *yaml.Node, path string) { p.duration(n, path, &s.Duration) }},
		{"seed", func(n *yaml.Node, path string) { intValue(p, n, path, &s.Seed, math.MinInt64, math.MaxInt64) }},
		{"tuning", func(n *yaml.Node, path string) { p.tuning(n, path, &s.Tuning) }},
		{"vms", func(n *yaml.Node, path string) { s.VMs = p.vms(n, path) }},
	})
	s.check(p)
	if err := p.err(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// decodeDocument returns the root node of the only YAML document in data.
func decodeDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Problems: []*FieldError{{Msg: "the spec is empty"}}}
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return nil, &Error{Problems: []*FieldError{{Line: extra.Line, Msg: "more than one YAML document"}}}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &Error{Problems: []*FieldError{{Msg: "the spec is empty"}}}
	}
	return doc.Content[0], nil
}

// field is a known key of a mapping and what to do with its value.
type field struct {
	key string
	set func(n *yaml.Node, path string)
}

// mapping walks a mapping node, handing each known key's value to its field and reporting unknown, duplicate
// and merge keys.
func (p *problems) mapping(n *yaml.Node, path string, fields []field) {
	n = deref(n)
	if !p.kind(n, path, yaml.MappingNode, "a mapping") {
		return
	}
	known := make([]string, len(fields))
	for i, f := range fields {
		known[i] = f.key
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.report(path, k.Line, "keys must be plain strings, got %s", describeNode(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			p.report(strings.TrimPrefix(path+".<<", "."), k.Line, "merge keys are not supported")
			continue
		}
		kpath := join(path, k.Value)
		idx := -1
		for j, f := range fields {
			if f.key == k.Value {
				idx = j
			}
		}
		switch {
		case idx < 0:
			p.addAt(kpath, k.Line, "unknown key, expected one of %s", strings.Join(known, ", "))
		case seen[k.Value]:
			p.report(kpath, k.Line, "duplicate key")
		default:
			seen[k.Value] = true
			p.lines[kpath] = k.Line
			fields[idx].set(v, kpath)
		}
	}
}

// kind reports whether n is of kind want, reporting the problem if not.
func (p *problems) kind(n *yaml.Node, path string, want yaml.Kind, what string) bool {
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		if path == "" {
			p.addAt(path, n.Line, "the spec is empty")
		} else {
			p.addAt(path, n.Line, "has no value (leave the key out to get its default)")
		}
	case n.Kind == want:
		return true
	case path == "":
		p.addAt(path, n.Line, "the spec must be %s, got %s", what, describeNode(n))
	default:
		p.addAt(path, n.Line, "must be %s, got %s", what, describeNode(n))
	}
	return false
}

func (p *problems) vms(n *yaml.Node, path string) []VM {
	n = deref(n)
	if !p.kind(n, path, yaml.SequenceNode, "a list of VMs") {
		return nil
	}
	if len(n.Content) > MaxVMs {
		p.addAt(path, n.Line, "%d VMs, at most %d", len(n.Content), MaxVMs)
		return nil
	}
	out := make([]VM, len(n.Content))
	for i, item := range n.Content {
		vpath := fmt.Sprintf("%s[%d]", path, i)
		p.lines[vpath] = item.Line
		vm := &out[i]
		*vm = VM{Weight: DefaultWeight, Channels: DefaultChannels, Count: DefaultCount}
		p.mapping(item, vpath, []field{
			{"name", func(n *yaml.Node, path string) { stringValue(p, n, path, &vm.Name) }},
			{"weight", func(n *yaml.Node, path string) { intValue(p, n, path, &vm.Weight, 1, MaxWeight) }},
			{"cap", func(n *yaml.Node, path string) { p.capValue(n, path, &vm.Cap) }},
			{"channels", func(n *yaml.Node, path string) { intValue(p, n, path, &vm.Channels, 1, MaxChannels) }},
			{"count", func(n *yaml.Node, path string) { intValue(p, n, path, &vm.Count, 1, MaxCount) }},
			{"workload", func(n *yaml.Node, path string) { p.workload(n, path, &vm.Workload) }},
		})
	}
	return out
}

func (p *problems) workload(n *yaml.Node, path string, w *Workload) {
	p.mapping(n, path, []field{
		{"kind", func(n *yaml.Node, path string) { stringValue(p, n, path, &w.Kind) }},
		{"kernels", func(n *yaml.Node, path string) { intValue(p, n, path, &w.Kernels, 1, MaxKernels) }},
		{"kernel_us", func(n *yaml.Node, path string) { intValue(p, n, path, &w.KernelUS, 1, MaxKernelUS) }},
		{"sleep_us", func(n *yaml.Node, path string) { intValue(p, n, path, &w.SleepUS, 0, MaxSleepUS) }},
		{"depth", func(n *yaml.Node, path string) { intValue(p, n, path, &w.Depth, 1, MaxDepth) }},
		{"start", func(n *yaml.Node, path string) { p.duration(n, path, &w.Start) }},
		{"on", func(n *yaml.Node, path string) { p.duration(n, path, &w.On) }},
		{"off", func(n *yaml.Node, path string) { p.duration(n, path, &w.Off) }},
	})
}

func (p *problems) tuning(n *yaml.Node, path string, t *Tuning) {
	p.mapping(n, path, []field{
		{"poll_ratio", func(n *yaml.Node, path string) { p.number(n, path, &t.PollRatio, "-1 or a number in (0, 10000]") }},
		{"idle_factor", func(n *yaml.Node, path string) { p.number(n, path, &t.IdleFactor, "a number in [1, 10000]") }},
		{"neon_window", func(n *yaml.Node, path string) { p.duration(n, path, &t.NeonWindow) }},
		{"window", func(n *yaml.Node, path string) { intValue(p, n, path, &t.Window, -1, MaxWindowRecords) }},
		{"inflight_budget", func(n *yaml.Node, path string) { p.duration(n, path, &t.InflightBudget) }},
		{"neon_freerun_ratio", func(n *yaml.Node, path string) {
			p.number(n, path, &t.NeonFreerunRatio, "a number in (0, 10000]")
		}},
		{"arbitration", func(n *yaml.Node, path string) { stringValue(p, n, path, &t.Arbitration) }},
		{"quantum", func(n *yaml.Node, path string) { p.duration(n, path, &t.Quantum) }},
		{"handoff", func(n *yaml.Node, path string) { p.duration(n, path, &t.Handoff) }},
		{"sim_timeslice", func(n *yaml.Node, path string) { p.duration(n, path, &t.SimTimeslice) }},
	})
}

func stringValue[T ~string](p *problems, n *yaml.Node, path string, dst *T) {
	n = deref(n)
	if p.kind(n, path, yaml.ScalarNode, "a string") {
		*dst = T(n.Value)
	}
}

// intValue stores an integer scalar. The range is checked by Validate; here it only names the allowed range
// when the value is no integer or does not fit dst.
func intValue[T int | int64 | uint32](p *problems, n *yaml.Node, path string, dst *T, lo, hi int64) {
	n = deref(n)
	if !p.kind(n, path, yaml.ScalarNode, "an integer") {
		return
	}
	var v int64
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil || int64(T(v)) != v {
		p.addAt(path, n.Line, "must be an integer from %d to %d, got %s", lo, hi, quote(n.Value))
		return
	}
	*dst = T(v)
}

func (p *problems) capValue(n *yaml.Node, path string, dst *float64) {
	p.number(n, path, dst, "a number in (0, 1]")
}

// number stores a number scalar; want describes the allowed values, which Validate checks.
func (p *problems) number(n *yaml.Node, path string, dst *float64, want string) {
	n = deref(n)
	if !p.kind(n, path, yaml.ScalarNode, "a number") {
		return
	}
	var v float64
	if tag := n.ShortTag(); (tag != "!!int" && tag != "!!float") || n.Decode(&v) != nil {
		p.addAt(path, n.Line, "must be %s, got %s", want, quote(n.Value))
		return
	}
	*dst = v
}

var bareNumber = regexp.MustCompile(`^[-+]?[0-9._]+([eE][-+]?[0-9]+)?$`)

func (p *problems) duration(n *yaml.Node, path string, dst *time.Duration) {
	n = deref(n)
	if !p.kind(n, path, yaml.ScalarNode, "a duration") {
		return
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		hint := ""
		if bareNumber.MatchString(n.Value) {
			hint = " (a bare number has no unit)"
		}
		p.addAt(path, n.Line, "must be a duration with a unit (ns, us, ms, s, m, h) such as 10s, 500ms or 1m, got %s%s",
			quote(n.Value), hint)
		return
	}
	*dst = d
}

// deref follows an alias to its anchored node. Anchors cannot contain themselves, so one step suffices.
func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return quote(n.Value)
	}
	return "something else"
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// join appends key to path, quoting a key that would make the path ambiguous.
func join(path, key string) string {
	if !plainKey.MatchString(key) {
		key = quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}
