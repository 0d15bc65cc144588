package framework

import (
	"encoding/json"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// The agent's JSON results are declared here rather than imported, so the
// suite checks the output format the binary prints, field names included.

// Percentiles summarise durations in nanoseconds.
type Percentiles struct {
	P50  int64 `json:"p50"`
	P90  int64 `json:"p90"`
	P99  int64 `json:"p99"`
	Max  int64 `json:"max"`
	Mean int64 `json:"mean"`
}

// ThrottleResult is the output of `sluice-agent run throttle --json`.
type ThrottleResult struct {
	Workload       string      `json:"workload"`
	KernelUs       float64     `json:"kernel_us"`
	Depth          int         `json:"depth"` // kernels kept in flight
	Kernels        uint64      `json:"kernels"`
	Errors         uint64      `json:"errors"`
	ElapsedNs      int64       `json:"elapsed_ns"`
	Turnaround     Percentiles `json:"turnaround_ns"`
	SubmittedGPUNs uint64      `json:"submitted_gpu_ns"`
}

// MemsetResult is the output of `sluice-agent run memset --json`.
type MemsetResult struct {
	Workload   string      `json:"workload"`
	Size       uint64      `json:"size"`
	Buffers    int         `json:"buffers"`
	AllocError string      `json:"alloc_error"`
	Memsets    int         `json:"memsets"`
	Turnaround Percentiles `json:"turnaround_ns"`
}

// LatencyResult is the output of `sluice-agent run latency --json`.
type LatencyResult struct {
	Workload  string      `json:"workload"`
	Count     int         `json:"count"`
	ElapsedNs int64       `json:"elapsed_ns"`
	RoundTrip Percentiles `json:"round_trip_ns"`
}

// WordCountResult is the output of `sluice-agent run wordcount --json`.
type WordCountResult struct {
	Files int    `json:"files"`
	Words uint64 `json:"words"`
	Bytes uint64 `json:"bytes"`
	Errno int    `json:"errno"` // the first failed call's errno; 0: none failed
}

// SyscallResult is the output of `sluice-agent run syscall NAME ... --json`.
type SyscallResult struct {
	Ret   int64 `json:"ret"`
	Errno int   `json:"errno"`
}

// Decode asserts that r succeeded and decodes its stdout as JSON into a T.
func Decode[T any](r Result) T {
	ginkgo.GinkgoHelper()
	gomega.Expect(r.ExitCode).To(gomega.Equal(0), "%s", r)
	var v T
	gomega.Expect(json.Unmarshal([]byte(r.Stdout), &v)).To(gomega.Succeed(), "decoding JSON from %s", r)
	return v
}

// Throttle runs `sluice-agent run throttle` with n kernels of kernel each,
// back to back, and returns its result.
func (d *Daemon) Throttle(endpoint string, kernel time.Duration, n int) ThrottleResult {
	ginkgo.GinkgoHelper()
	return Decode[ThrottleResult](d.Agent(endpoint, ThrottleArgs(kernel, n)...))
}

// ThrottleArgs is the agent command line for n kernels of kernel each.
func ThrottleArgs(kernel time.Duration, n int) []string {
	return []string{"run", "throttle", "--kernel", kernel.String(), "--kernels", itoa(int64(n)), "--json"}
}
