// Package spec owns the benchmark spec format: the YAML file that `sluicectl bench run SPEC` reads (docs/architecture.md, "The benchmark harness").
// Other tools generate specs, so this comment is the contract; Parse, Validate and Marshal enforce it.
//
// # Format
//
//	backend: sim            # sim | cuda                          (default sim)
//	clock: virtual          # virtual | wall                      (default virtual; virtual needs backend sim)
//	policy: dfq             # none | dfq | cap | timeslice        (default dfq)
//	accounting: loga        # loga | loga-segment-average | neon-sampling | off   (default loga)
//	duration: 10s           # how long throttle VMs run; required when any VM has a throttle workload
//	seed: 1                 # any 64-bit integer                  (default 1)
//	tuning:                 # optional; every key optional
//	  poll_ratio: 49        # -1, or a number in (0, 10000]: LoGA's non-poll : poll ratio (default: accounting's)
//	  idle_factor: 10       # number in [1, 10000]: period stretch when one VM is active (default: accounting's)
//	  window: 4             # -1, or 1 to 1048576: records a channel keeps forwarded (default: the mediator's)
//	  inflight_budget: 4ms  # duration in (0, 1h], or negative: a VM's in-flight budget (default: the mediator's)
//	  neon_window: 2ms      # duration in (0, 1s]: NEON's sampling window per VM (default 2ms)
//	  neon_freerun_ratio: 5 # number in (0, 10000]: NEON's freerun : sampling windows ratio (default 5)
//	  sim_timeslice: 2ms    # duration in (0, 1s], backend sim only: the sim time-slices between VMs (default: it does not)
//	vms:                    # at least one
//	  - name: app           # required; ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$
//	    weight: 1           # integer 1..1000000                  (default 1)
//	    cap: 0.5            # number in (0, 1]; optional
//	    channels: 1         # integer 1..64                       (default 1)
//	    count: 1            # integer 1..1024                     (default 1)
//	    workload:           # required
//	      kind: throttle    # throttle | app                      (required)
//	      kernel_us: 100    # integer 1..10000000                 (required)
//	      sleep_us: 0       # integer 0..3600000000               (default 0)
//	      depth: 1          # integer 1..4096: kernels kept in flight (default 1)
//	      start: 0s         # duration, at least 0: delay before the first kernel (default 0)
//	      on: 200ms         # durations, both or neither: bursty, submits during on,
//	      off: 300ms        # then nothing during off, repeating (default: always on)
//	  - name: job
//	    workload:
//	      kind: app
//	      kernels: 2000     # integer 1..100000000; required for app, not allowed for throttle
//	      kernel_us: 150
//	      sleep_us: 20
//
// # Meaning
//
// A throttle workload submits kernels of kernel_us, sleeping sleep_us after each, until duration has passed. An
// app workload submits a fixed number of kernels (kernels) of kernel_us with sleep_us after each and runs to
// completion whatever the duration; its turnaround is measured. Duration does not apply to app VMs; a spec of app
// VMs only may leave it out. Depth keeps that many kernels in flight (a VM that pre-queues its ring): each
// completion lets the next kernel go after sleep_us. Start delays the first kernel (a throttle still stops at
// duration). On and off alternate from start: kernels are submitted only during on stretches; one due during an
// off stretch waits for the next on.
//
// Tuning changes the accounting methods' parameters: poll_ratio is LoGA's non-poll : poll length ratio (-1 polls
// all the time, as the LoGA paper's accuracy experiments do, and turns off the stretching of idle periods);
// idle_factor is how many times longer a period is when at most one VM was active in its poll phase;
// neon_window is how long each VM runs alone in a neon-sampling phase, and neon_freerun_ratio the length of a
// freerun phase over the sum of the windows before it. window bounds how many records a channel keeps forwarded to
// the GPU and not completed (-1: no bound, as a GPU reading the ring itself would); the rest wait in the ring.
// inflight_budget is the estimated GPU time each VM may keep forwarded and not completed over all its channels (at
// least one command; the mediator's default is half the scheduling period; a negative duration such as -1s:
// no bound). It applies with accounting loga and loga-segment-average under policies other than none.
// arbitration is who decides whose work is on the GPU: driver (every VM forwards at once and the GPU's own
// scheduling shares it out) or turns (one VM at a time has work on the GPU, for a quantum once another
// waits, the scheduler picking the next; docs/architecture.md, "Accounting and scheduling") or auto (turns while at
// least two VMs each had work outstanding for 90% of the last scheduling period, driver otherwise; the result's
// arbitration_in_force, arbitration_switches and each VM's outstanding say what it did); left out, auto under
// policies dfq and cap and driver under none and timeslice (Spec.Arbitration); quantum is the turn quantum
// (default 5ms). They apply with accounting loga and loga-segment-average.
//
// sim_timeslice makes the simulated GPU time-slice between VMs as a GPU's driver does between contexts: a
// command that has run that long while another VM's waits is preempted, and the two take turns (backend sim only;
// left out, the sim runs each command to its end, as the GPU of the LoGA paper). It is how the sim shows what a
// real GPU's time slicing does to a workload, such as a kernel far longer than a turn under arbitration turns.
//
// Weight is the VM's share under policy dfq (and timeslice). Cap is the VM's maximum share of the GPU; it applies
// only under policy cap and is accepted but ignored under other policies (Warnings reports it). Under policy cap a
// VM without cap is uncapped, and caps need not sum to 1: they are limits, not reservations.
//
// Channels is the number of channels (streams) the VM's workload submits on. Count replicates a VM: count N
// stands for N identical VMs named name-0 … name-(N-1); count 1 keeps the plain name. Names, after this
// expansion, must be unique, and a spec holds at most 4096 VMs after expansion.
//
// # Syntax
//
// Durations are strings with a unit as Go's time.ParseDuration reads them (10s, 500ms, 1m30s); a bare number is
// an error because its unit would be a guess. Integers must be written as integers (1000, not 1e3 or "1000").
// Null values (a key with nothing after it) are errors, not defaults: leave the key out instead. Unknown keys,
// duplicate keys, merge keys (<<) and more than one YAML document are errors. Every error names the key path
// (vms[1].workload.kernel_ms) and, for parsed specs, the line; all problems found are reported together in one
// error that matches ErrInvalid under errors.Is and is an *Error under errors.As. Load reads at most MaxFileSize
// (1 MiB) of a file: a larger one (or an endless one, /dev/zero) is refused with ErrInvalid.
//
// # Canonical form
//
// Marshal writes every field explicitly (cap, kernels, duration, tuning and its keys, depth, start, on and off only
// when set) in the order above, so Parse(Marshal(s)) returns s.WithDefaults().
package spec
