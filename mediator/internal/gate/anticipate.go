package gate

// Anticipation: a turn holder that drains (nothing in flight, nothing
// pending) while others wait passes the turn at once, unless it is likely
// to come back at once and is owed the GPU: then it keeps the idle turn a
// moment (anticipateLocked), as anticipatory I/O schedulers keep a disk
// idle for the process that just read. Two cases call for it.
//
// A closed loop of depth one (submit, wait for the completion, submit the
// next) drains after every command. Passing the turn at each drain serves
// it one command per turn of the others': a VM of 100 µs kernels beside
// one that keeps 1 ms kernels queued got 2% of the GPU where its share is
// half. So the gate learns each VM's think time, from the completion that
// drained it (channel.Budget.DrainedAt) to its next command forwarded
// (channel.Budget.Starts) or its next doorbell while latched (a knock), as
// a running mean (thinker). A holder behind every waiting VM (Picker.Behind:
// it would get the turn back next) whose think time is known and short
// keeps the idle turn for twice its mean and ThinkSlackNs from its drain,
// at most a quantum/AnticipationDiv, while it idled no more of its turn
// than it used (anticipateLocked).
//
// A waiting VM's recent commands ran a quantum or more
// (channel.Budget.Longest): passing the turn commits the GPU to a long
// command while the VM owed time waits behind it (a normal VM beside one of
// 500 ms kernels got 34-48% and a p99 of 500 ms). Then a holder that is
// behind keeps the idle turn for a quantum/AnticipationDiv, whatever its
// think time.
//
// The idle turn is charged to the holder with its turn (chargeLocked):
// from its drain to its next command, or to the anticipation's end. So what
// a holder idles comes out of its own share, as its think time would alone,
// and a guest that games the anticipation cannot take the others' share:
// one that learns a short think time and then stops costs the GPU one
// window (bounded by the quantum/AnticipationDiv), charged to it, and a
// think time above ThinkCap (a sleep) forgets what was learned, so a guest
// that alternates short and long pauses is anticipated at most once per
// ThinkLearn short ones.
//
// A turn ends at its quantum, anticipating or not (expire): the holder,
// charged its busy time and its idle turn, keeps the turn only if it has
// work and is still behind every waiting VM. Records a guest wrote without
// ringing its doorbell do not keep a turn: with nothing in flight the gate
// polls the holder's channels for them once (holderBusyLocked), so they are
// forwarded or its channel fails on them, and a holder whose pending
// records that poll did not forward passes the turn; the time it holds the
// contended turn with records pending and nothing in flight is charged to
// it as idle turn time.

const (
	// ThinkSlackNs is the margin of a think-time anticipation over twice
	// the holder's mean think time: a doorbell's and a completion's jitter.
	ThinkSlackNs = 10_000
	// ThinkLearn is how many think times in a row under the cap make a
	// VM's think time known.
	ThinkLearn = 3
	// ThinkFall: each think time moves the mean by 1/ThinkFall of the
	// difference, so a VM that changes its pace is relearned in a few
	// commands.
	ThinkFall = 4
	// ThinkCapDiv divides the quantum into the longest think time that
	// counts as thinking (ThinkCap: 312 µs at the default quantum); a longer
	// one is a sleep, and the VM is not anticipated until it thinks
	// briefly ThinkLearn times in a row again.
	ThinkCapDiv = 2 * AnticipationDiv
)

// thinker is what the gate learned of a VM's think time.
type thinker struct {
	open   bool   // a think spell runs: the VM drained with nothing pending
	from   int64  // when it drained
	starts uint64 // its budget's Starts then: they move when it forwards again
	mean   int64  // the running mean of its think times, ns
	n      int    // think times in a row under the cap (at most ThinkLearn)
}

// sample feeds one think time; one above capNs (a sleep) forgets the mean.
func (th *thinker) sample(ns, capNs int64) {
	ns = max(ns, 0)
	if ns > capNs {
		th.mean, th.n = 0, 0
		return
	}
	if th.n == 0 {
		th.mean = ns
	} else {
		th.mean += (ns - th.mean) / ThinkFall
	}
	th.n = min(th.n+1, ThinkLearn)
}

// window is how long after its drain the VM is anticipated: 0 while its
// think time is not known.
func (th *thinker) window(limit int64) int64 {
	if th == nil || th.n < ThinkLearn {
		return 0
	}
	return min(2*th.mean+ThinkSlackNs, limit)
}

// expected is how long the VM is expected to think: its mean think time
// once known, else 0.
func (th *thinker) expected() int64 {
	if th == nil || th.n < ThinkLearn {
		return 0
	}
	return th.mean
}

// thinkerLocked is VM id's thinker, made on first use.
func (g *Gate) thinkerLocked(id uint32) *thinker {
	t := g.turns
	if t.think == nil {
		t.think = map[uint32]*thinker{}
	}
	th := t.think[id]
	if th == nil {
		th = &thinker{}
		t.think[id] = th
	}
	return th
}

// drained is a VM's drain (the budget's Drained hook) under the turns t:
// its think time is learned, and the turn settles.
func (g *Gate) drained(t *turnState, id uint32) {
	g.mu.Lock()
	defer g.unlock()
	if g.turns != t {
		return
	}
	g.thinkDrainedLocked(id)
	g.settleLocked()
}

// thinkDrainedLocked ends the think spell the VM's last drain began (it
// forwarded since: the think time ran to that start) and begins one at this
// drain if nothing of the VM is pending. A command forwarded before this
// call (a guest faster than the hook) ended the spell already.
func (g *Gate) thinkDrainedLocked(id uint32) {
	b := g.budgets[id]
	if b == nil {
		return
	}
	t, th := g.turns, g.thinkerLocked(id)
	capNs := t.cfg.QuantumNs / ThinkCapDiv
	n, at := b.Starts()
	d := b.DrainedAt()
	if th.open && n != th.starts && at <= d {
		th.sample(at-th.from, capNs)
	}
	th.open = false
	switch {
	case b.InFlight() > 0:
		if at >= d {
			th.sample(at-d, capNs)
		}
	case !g.pendingLocked(id):
		th.open, th.from, th.starts = true, d, n
	}
}

// thinkKnockedLocked ends a latched VM's think spell at its doorbell.
func (g *Gate) thinkKnockedLocked(id uint32) {
	t := g.turns
	if th := t.think[id]; th != nil && th.open {
		th.open = false
		th.sample(t.cfg.Clock.Now()-th.from, t.cfg.QuantumNs/ThinkCapDiv)
	}
}

// anticipationLocked is how long after its drain holder h keeps the idle
// turn while others wait (see above); 0: not at all.
func (g *Gate) anticipationLocked(h uint32, others []uint32) int64 {
	t := g.turns
	limit := t.cfg.QuantumNs / AnticipationDiv
	for _, id := range others {
		if b := g.budgets[id]; b != nil && b.Longest() >= t.cfg.QuantumNs {
			return limit
		}
	}
	return t.think[h].window(limit)
}

// anticipateLocked decides whether holder h, drained while others wait,
// keeps the idle turn (once per idle spell) and starts that wait: when it
// is behind every waiting VM, anticipationLocked's window from its drain
// has not run out, and the idle turn time it had in this turn and its
// expected think time (its mean, once known) are no more than its busy
// time in this turn. The last bounds what anticipation costs the GPU by
// what it gains: a VM that thinks longer than its commands run (10 µs
// kernels 300 µs apart beside VMs that keep the GPU busy idled 30% of the
// GPU, anticipated at every drain) is not anticipated, and a holder idles
// about half of its turn at most, one think time's jitter more.
func (g *Gate) anticipateLocked(h uint32, others []uint32) bool {
	t := g.turns
	b := g.budgets[h]
	if t.waited || !t.contended || b == nil {
		return false
	}
	if t.turnIdle+t.think[h].expected() > b.BusyNs()-t.turnBusy {
		return false // it would idle more of this turn than it used
	}
	now := t.cfg.Clock.Now()
	left := b.DrainedAt() + g.anticipationLocked(h, others) - now
	if left <= 0 || !t.cfg.Picker.Behind(h, others) {
		return false
	}
	t.idle, t.waited = true, true
	t.idleFrom, t.idleEnd = now, now+left
	t.idleStarts, _ = b.Starts()
	g.armAnticipationLocked(now)
	return true
}

// armAnticipationLocked arms the timer that ends the anticipation at
// t.idleEnd: the clock's reusable timer (Clock.Timer) reset to it, or
// with After, one unless one armed already fires by then (at most one
// armed at a time but for an end earlier than the armed one's; one that
// fires early for a later anticipation arms the next: anticipated). A
// depth-1 VM is anticipated at nearly every drain and comes back within
// the window; a timer made for each was one per command (in the daemon a
// goroutine and Gate.mu each).
func (g *Gate) armAnticipationLocked(now int64) {
	t := g.turns
	if t.cfg.Clock.Timer != nil {
		if t.antReset == nil {
			t.antReset = t.cfg.Clock.Timer(func() { g.anticipated(t, 0) })
		}
		t.antReset(t.idleEnd - now)
		return
	}
	if t.antAt > now && t.antAt <= t.idleEnd {
		return
	}
	at := t.idleEnd
	t.antAt = at
	t.cfg.Clock.After(at-now, func() { g.anticipated(t, at) })
}

// anticipated is the anticipation timer armed for at (0: the reusable
// one): it ends an
// anticipation the holder did not use, or arms the timer again for one
// that ends later.
func (g *Gate) anticipated(t *turnState, at int64) {
	g.mu.Lock()
	defer g.unlock()
	if g.turns != t {
		return
	}
	if t.antAt == at {
		t.antAt = 0 // it fired
	}
	if !t.idle {
		return
	}
	if now := t.cfg.Clock.Now(); now < t.idleEnd {
		g.armAnticipationLocked(now)
		return
	}
	g.idleEndedLocked(t.holder, true)
	g.settleLocked()
}

// idleEndedLocked ends the holder's anticipation if it came back (its
// budget's Starts moved: the idle turn ran until then) or if over (until
// now), counting the idle time for its charge, and reports whether it did.
func (g *Gate) idleEndedLocked(h uint32, over bool) bool {
	t := g.turns
	if !t.idle {
		return false
	}
	end := t.cfg.Clock.Now()
	if b := g.budgets[h]; b != nil {
		if n, at := b.Starts(); n != t.idleStarts {
			end = at
		} else if !over {
			return false
		}
	}
	t.addIdle(end - t.idleFrom)
	t.idle = false
	return true
}

// addIdle counts ns of idle turn time: to charge, and of this turn's.
func (t *turnState) addIdle(ns int64) {
	ns = max(ns, 0)
	t.idleNs += ns
	t.turnIdle += ns
}

// idleChargeLocked is the holder's idle turn time to charge now (an
// anticipation that still runs counts up to now; one the holder came back
// from, up to its return), and zeroes it.
func (g *Gate) idleChargeLocked() int64 {
	t := g.turns
	if g.idleEndedLocked(t.holder, false) {
		// The holder came back: its idle turn ended then, not now, and
		// its next drain may be anticipated.
		t.waited = false
	}
	if t.idle {
		now := t.cfg.Clock.Now()
		t.addIdle(now - t.idleFrom)
		t.idleFrom = now
	}
	if t.pend {
		now := t.cfg.Clock.Now()
		t.addIdle(now - t.pendFrom)
		t.pendFrom = now
	}
	ns := t.idleNs
	t.idleNs = 0
	return ns
}
