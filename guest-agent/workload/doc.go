// Package workload runs the guest-side benchmarks on one sdk.Channel:
// Throttle, LoGA's throttle benchmark (spin kernels of a fixed length with
// sleeps between them), Memset (device buffers allocated up to the VM's
// quota and MEMSET in turn), and Latency, NOP round trips through the
// doorbell, the host's dispatch and completion. Each returns a JSON-ready
// result.
package workload
