//go:build !linux

package main

import (
	"fmt"
	"os"
)

func run() int {
	fmt.Fprintln(os.Stderr, "sluice-init: Linux guests only")
	return 2
}
