// Package sched owns the mediator's scheduling decisions: which VMs have their
// doorbells latched (held) for the coming non-poll phase (docs/architecture.md, "Accounting and scheduling";
// LoGA §3.4). It is pure and deterministic: no goroutines, no clock; time
// arrives only through EndPeriod, in nanoseconds of the backend's clock. A
// Scheduler is safe for concurrent use (one mutex, held for each call), so the
// host API may change weights while the poller ends periods.
//
// # Periods
//
// Time is divided into periods, each a poll phase followed by a non-poll
// phase. At the end of each poll phase accounting calls EndPeriod with every
// VM's charge for the period just ended, and the Decision names the VMs to
// hold. A decision stands until the next EndPeriod; a gate that releases held
// VMs during poll phases gives them time the cap policy does not expect.
//
// A VM counts as active in a period when its charge says so or when it was
// charged anything in it; VMs missing from the charges were idle. A held VM with commands waiting in its rings must be
// reported active (its work is queued): that is how a held VM that is the
// only one left with work gets released.
//
// Weight, cap and policy changes apply at the next EndPeriod: the period just
// ended is charged under the values it ran with, the decision for the coming
// one uses the new values. A weight change keeps every virtual time (it does
// not rewrite history).
//
// # Policy dfq (default): disengaged fair queuing
//
// Each VM has a virtual time. A charge of BusyNs advances it by
//
//	BusyNs × (mean weight of the VMs active in the period) / weight
//
// so that with equal weights virtual time is GPU nanoseconds, and in general a
// VM of average weight advances one nanosecond per nanosecond it ran. Only
// ratios matter for fairness: with weights 1:2:4 all saturating, the shares
// tend to 1/7, 2/7, 4/7. Unlike LoGA's Δvt = t_app/t_total × (t_poll +
// t_nonpoll), the charge is absolute time: a VM alone on a GPU it does not
// fill is not charged for the idle time.
//
// t_sys is the minimum virtual time of the VMs active in the period. A VM
// behind t_sys (idle, or satisfied, see below) is pulled up to it: nobody
// banks credit for time it did not ask for. A VM ahead of t_sys by more than
// the threshold (Config.Threshold; 0 means half a period, (PollNs +
// NonPollNs) / 2, see DefaultThresholdDiv) is held for the next non-poll
// phase. Work forwarded before a hold cannot be
// recalled: it is charged when it runs, and the debt holds the VM back until
// the others catch up. How much can be forwarded is bounded by the VM's
// in-flight budget (channel.Budget, sized by mediator/internal/engine from
// the period: half the threshold by default), so a held VM stops using the
// GPU within a budget of the hold. A held VM is released as soon as it is within the
// threshold again. If every active VM would be held (min makes it impossible;
// the guard stays) or no VM is active, nobody is held.
//
// Satisfied VMs (an addition to LoGA, for work conservation): when the GPU
// was not saturated in a period (the charges add up to less than
// Config.Saturation of its length, or their smoothed load over the recent
// periods does, see LoadSmoothing: the charges are a sample), no VM that ran unheld was kept from the
// GPU, so such VMs do not set t_sys: t_sys is the minimum over the VMs that
// were held and still have work, and if there are none, t_sys advances by the
// largest advance of any active VM. Behind t_sys they are pulled up like idle
// VMs. Without this, a light VM that submits every period pins t_sys and a
// co-running VM is held while the GPU idles. Two light VMs are then never
// held; a saturating VM next to a light one still is, one period in three
// with the default threshold, because while the GPU is saturated a light VM
// cannot be told from one starved by longer kernels without backlog figures
// from accounting.
//
// Virtual times are stored relative to t_sys (renormalized every period) and
// saturate at 2^60 ns, so nothing overflows over long runs; TSys itself
// saturates at the int64 maximum (diagnostic only).
//
// # Policy cap
//
// A VM with a cap c (0 < c ≤ 1) may use at most the fraction c of the GPU's
// time, even if the GPU would otherwise idle (like NVIDIA's fixed share). Each
// capped VM has a balance: every period adds c × its length and subtracts the
// VM's charge. A VM whose balance is negative is held: a hold follows an
// overrun, it cannot precede it (work is not recalled). The balance is
// bounded above by c·(1−c)·CapWindow periods, so a VM back from idle runs at
// most c·CapWindow full periods in a row plus the one that overruns, and its
// long-run share converges to c. VMs without a cap are never held, and dfq is
// not applied: cap limits, it does not share out.
//
// # Policy timeslice
//
// Engaged round robin, a baseline: in each period exactly one VM runs and all
// others are held, active or not, so a VM that becomes active waits for its
// turn. The turn passes to the next active VM in id order after the current
// one has had weight consecutive periods or has no work. With no VM active,
// the turn stays where it is.
//
// # Policy none
//
// Accounting only: nobody is held. Virtual times are still kept under every
// policy, so lag is a fairness diagnostic under all of them.
//
// # Turns
//
// Under arbitration turns (mediator/internal/gate) one VM at a time has
// work on the GPU, and the scheduler also picks whose turn is next
// (NextTurn) and is charged each turn (ChargeTurn): start-time fair queuing
// over turns by weight, with its own lags kept apart from dfq's virtual
// times (turns.go). The policy's holds for a limit or a turn of its own
// (cap, timeslice) still apply: the gate gives no turn to a VM they hold.
// dfq's holds of a VM running ahead do not under turns, where the turn
// lags share the GPU (gate.Gate.ApplyAhead).
//
// # Policy switches
//
// Switching to none releases everyone at the next EndPeriod. Switching into
// dfq forgives debt run up beyond the threshold under a policy that did not
// promise fairness (lags are clamped to the threshold, so a hog is held again
// at once if it keeps going, not for minutes to repay history); switching into
// cap forgives negative cap balances likewise.
//
// # Robustness
//
// Charges for unknown VMs (removed mid-period) are ignored; a period's
// negative BusyNs counts as 0 (a turn's may be negative: ChargeTurn nets an
// estimate charged ahead); several charges for one VM add up. A period of zero or
// negative length changes no time-based state (charges, virtual times, cap
// balances, timeslice turns); it still applies pending changes and recomputes
// the holds, which stay only where still justified.
package sched
