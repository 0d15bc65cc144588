package cli

import (
	"fmt"
	"strings"
	"time"
)

// maxCommandValue is a VM's longest command: a duration, or "default" (0:
// the daemon's). The daemon checks the range.
type maxCommandValue struct{ ns *int64 }

func (v maxCommandValue) String() string {
	if v.ns == nil || *v.ns == 0 {
		return ""
	}
	return time.Duration(*v.ns).String()
}

func (v maxCommandValue) Set(s string) error {
	if strings.EqualFold(strings.TrimSpace(s), "default") {
		*v.ns = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d <= 0 {
		return fmt.Errorf("want a positive duration, e.g. 250ms, or default")
	}
	*v.ns = int64(d)
	return nil
}

func (maxCommandValue) Type() string { return "duration" }

// maxCommandField is a VM's longest command and how often its commands ran
// past it.
func maxCommandField(ns, timeouts int64) string {
	s := time.Duration(ns).String()
	switch timeouts {
	case 0:
		return s
	case 1:
		return s + ", 1 command ran past it (the VM's GPU work was ended)"
	}
	return fmt.Sprintf("%s, %d commands ran past it (the VM's GPU work was ended each time)", s, timeouts)
}
