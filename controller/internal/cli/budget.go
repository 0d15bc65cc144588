package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-gpu/sluice/api/hostapi"
)

// inflightField is a VM's in-flight budget for "vm get": the estimated GPU
// time it has forwarded and not completed, its budget, what a kernel or copy
// of it is costed at and how often its channels stopped for room.
func inflightField(vm hostapi.VM) string {
	s := time.Duration(vm.InflightNs).String() + ", no budget"
	if vm.InflightBudgetNs > 0 {
		s = fmt.Sprintf("%v of a %v budget", time.Duration(vm.InflightNs), time.Duration(vm.InflightBudgetNs))
	}
	est := "kernels and copies not measured yet"
	if vm.EstimateNs > 0 {
		est = "a kernel or copy costed " + time.Duration(vm.EstimateNs).String()
	}
	return fmt.Sprintf("%s, %s, %s", s, est, stallsText(vm.BudgetStalls))
}

func stallsText(n uint64) string {
	if n == 1 {
		return "1 stall for room"
	}
	return strconv.FormatUint(n, 10) + " stalls for room"
}

// inflightCell is the IN FLIGHT column of top: in flight over the budget,
// "-" for none.
func inflightCell(inflightNs, budgetNs int64) string {
	b := "-"
	if budgetNs > 0 {
		b = shortDuration(budgetNs)
	}
	return shortDuration(inflightNs) + "/" + b
}

// estimateCell is the EST column of top: what a kernel or copy is costed
// at, "-" before one was measured.
func estimateCell(ns int64) string {
	if ns <= 0 {
		return "-"
	}
	return shortDuration(ns)
}

// shortDuration is ns in a table's few characters: 0, µs below a
// millisecond, else ms or s to a hundredth.
func shortDuration(ns int64) string {
	switch {
	case ns <= 0:
		return "0"
	case ns < 999_500: // below what rounds to 1000µs
		return fmt.Sprintf("%dµs", (ns+500)/1e3)
	case ns < 999_995_000: // below what rounds to 1000.00ms
		return fmt.Sprintf("%.2fms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2fs", float64(ns)/1e9)
}
