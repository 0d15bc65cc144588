// Package accounting owns the mediator's per-VM GPU-time measurement: a
// LoGA-style poller that reads which channels the GPU is running
// (backend.StatusReader) without interrupting anything, and the estimators
// that turn those samples into GPU time charged to each VM (docs/architecture.md, "Accounting and scheduling").
// It decides nothing: the scheduler consumes its Periods.
//
// # Estimators
//
// An Estimator is pure and deterministic: it sees a poll phase as Begin, a
// sequence of Status samples, and End, and returns the Phase it measured.
// Three methods exist (Method):
//
// "loga" — LoGA done right: the TOTAL time each VM's commands ran. For each
// pair of consecutive samples at t0 and t1, and each engine:
//
//   - the same command running at both (same channel, same Since): its VM
//     is charged [max(t0, Since), t1];
//   - a different command running at t1, started at Since in (t0, t1]: the
//     previous VM is charged [t0, Since] and the new one [Since, t1]. This is
//     exact when the second command was queued before the first ended (a
//     saturated GPU: the dispatcher starts it the instant the engine frees
//     up). When the second was submitted after the engine went idle, the
//     previous VM is over-charged by the idle gap, which is less than one
//     sample interval (2 µs by default): a bias of at most t1−t0 per such
//     switch, toward the VM that ran first. A Since at or before t0 (a
//     backend inconsistency) charges the new command the whole interval;
//   - nothing running at t1: the previous command ended somewhere in
//     (t0, t1]; its VM is charged up to the midpoint (t0+t1)/2, which is
//     unbiased when the end is uniformly distributed in the interval;
//   - nothing running at t0 but a command at t1: [max(t0, Since), t1].
//
// The first sample of a phase has no predecessor: a command running then is
// charged from max(phase start, Since), so a command already running at Begin
// is charged only from the phase start. A command longer than the phase is
// charged for the whole phase: it never changes. Idle time is charged to
// nobody. When the time between the last sample and End is not zero, the
// commands running at the last sample are charged up to the midpoint of that
// stretch, as if nothing ran at End (the pollers always sample at End, so
// this does not arise with them).
//
// Split: the pieces above are laid on the timeline of (t0, t1] for every
// engine, and every elementary stretch covered by k pieces (k engines busy at
// once) gives each piece 1/k of its length (the remainder nanoseconds go one
// each to the first pieces). The total charged for a phase therefore never
// exceeds its length: the poller charges GPU wall time, not engine time. A
// VM running compute and copy at once is still charged the whole stretch
// (1/2 + 1/2); a VM sharing the GPU with another one's copy gets half.
//
// "loga-segment-average" — the baseline of LoGA's released code (the event
// policy of jkehne/loga) and of the paper's "LoGA-CL": per engine, a segment
// is a maximal run of consecutive samples showing the same channel (two
// commands of one channel back to back are one segment, idle ends a segment);
// its length is the time between the samples at which it was first seen and
// at which something else was seen (detection times, not Since). A segment
// open at Begin starts at the phase start; one open at End ends there (as the
// released code's pre- and post-phase accounting does). Each VM's weight is
// the average length of its segments, and the phase's busy time (measured as
// "loga" measures it, so both methods see the same total) is distributed in
// proportion to the weights:
//
//	Busy[vm] = busy × avg[vm] / Σ avg
//
// The released code distributes the whole epoch (poll + non-poll length)
// instead of the busy time, i.e. it also charges idle time; here only the
// weighting differs from "loga", to isolate its effect. The weighting is what
// NEON assumes of a saturated round-robin GPU (shares in proportion to
// command lengths) and is wrong whenever VMs do not alternate one command
// each: a VM with many short kernels separated by short gaps (each kernel a
// segment of its own) is under-charged next to a VM with a few long ones,
// and a VM with two channels is under-charged next to one with one. When two
// single-channel VMs strictly alternate, both methods agree.
//
// "off" charges nothing, and its poller reads the status only at phase
// boundaries (to learn the time). "neon-sampling" is a control mode (each VM
// alone in turn) implemented elsewhere; ParseMethod accepts it, NewEstimator
// and Config.Validate report ErrNotEstimator.
//
// Samples that do not advance time (Time at or before the previous sample's,
// or before Begin) are ignored; several entries for one engine in a Status
// count once (the first). Running channels count as active whether or not
// the Active list names them.
//
// # Phases and periods
//
// Time is cut into periods that tile the timeline; each holds one poll
// phase, and the scheduler decides at period ends. A period's lengths are
// planned when it starts, from the poll phase of the period before:
//
//   - poll = clamp(PollNs × active channels, MinPollNs, MaxPollNs), with
//     active channels the distinct channels seen active (at least 1); the
//     first period assumes 1;
//   - period = poll × (1 + Ratio) (Ratio < 0: poll all the time); when at
//     most one VM was active or waiting (Poller.SetWaiting: held with work
//     latched), IdleFactor times longer: there is nothing to arbitrate;
//   - the poll length and the rest are each drawn uniformly in ±Jitter
//     around their means (seeded: the same Seed gives the same lengths);
//   - then the poll phase's offset inside the period is drawn uniformly.
//
// At the period's end onPeriod gets the Period, its poll phase's
// measurement extrapolated over the whole period:
//
//	Busy[vm]  = Phase.Busy[vm] × (End − Start) / (Phase.End − Phase.Start)
//	Share[vm] = Phase.Busy[vm] / (Phase.End − Phase.Start)
//
// This is stratified random sampling, and it makes the extrapolation
// unbiased whatever the workload and the scheduler do: the period's length
// and the decision in force during it are fixed before the offset is
// drawn, so the poll phase is a uniform sample of a stretch that ran under
// one decision. The two obvious alternatives are biased, measurably: a poll
// phase at the start of its period, extrapolated forward, charges a VM held
// from then on as if it kept running (dfq on a 10× kernel-length skew
// stayed near Jain 0.69); one at the end, extrapolated back, sees the end
// of the stretch only, after a held VM's forwarded work drained and after
// bursty VMs switched (−35% for a hog that pre-queues its ring, −15 to −60%
// for on/off VMs), and adaptive lengths correlate with the state the next
// sample sees. The cost is latency: a VM that starts to over-use after its
// period's poll phase is seen one period later, so a hog is held one to two
// periods after it arrives.
//
// One exception keeps it unbiased too. A period stretched because at most
// one VM was active is checked every normal period length (a status read),
// and two VMs active end it early; if that is before its poll phase, the
// phase moves to that instant, and it stands only for the contended rest of
// the period: the stretch before is charged from the checks (the engines
// each VM ran on in them, the read at the period's start included), up to
// the middle between the last clean check and the cut, where the second VM
// started on average. Charging the whole stretch from a phase taken at the
// instant a second VM arrived overcharged VMs that burst beside a steady
// one by ~40% (TestBurstsNotOvercharged).
//
// Summing Busy over consecutive periods estimates a VM's GPU time over
// [first Start, last End]; the error of that sum shrinks as one over the
// square root of the number of periods (a sample of 1.9% of the time). With
// the wall driver timers wake late: the poll phase may start late, and a
// period ends when the poller gets to it (the actual times are used everywhere, as LoGA does).
//
// # Drivers
//
// NewVirtual runs the phases on a simulated timeline through an After-like
// function (the sim in manual drive): deterministic, every sample exactly on
// time (every SampleNs from the phase start, the last one exactly at the
// phase end). NewWall's Run spins through each poll phase on a locked OS
// thread, reading the status every SampleNs (timers fire about 1 ms late:
// sleeping is useless at µs scale), and sleeps through the non-poll phase on
// a timer; lateness there only stretches the non-poll phase.
//
// CPUNs is the poller's own CPU cost: with the wall driver the thread CPU
// time of the poll phases (CLOCK_THREAD_CPUTIME_ID on Linux, wall time
// elsewhere), with the virtual driver the wall time spent inside the
// estimator (Begin, Observe, End). PollNs is the total length of the poll
// phases on the backend clock: with the wall driver the poller spins through
// them, so PollNs / elapsed is the fraction of a core it keeps busy.
package accounting
