package syscalls

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-gpu/sluice/api/abi"
)

type stats struct {
	activity    atomic.Bool   // a kick since the poller last looked
	taken       atomic.Uint64 // slots taken, every kind
	batches     atomic.Uint64
	nonBlocking atomic.Uint64
	fastcalls   atomic.Uint64
	raced       atomic.Uint64
	lost        atomic.Uint64
	restarts    atomic.Uint64
	passes      atomic.Uint64 // scan passes over the slots
	passNs      atomic.Int64  // their time
	fullScans   atomic.Uint64 // sweeps of every state word started (readymap.go)
	hinted      atomic.Uint64 // READY slots found through their ready hint
	ring        atomic.Uint64 // calls read from the request ring
	ringBad     atomic.Uint64 // ring entries naming no slot of the area (dropped)
	ringSkipped atomic.Uint64 // ring positions skipped: claimed, never written
	served      atomic.Uint64 // blocking calls finished (result written)
	serviceNs   atomic.Int64  // their time from READY seen to FINISHED written
	serviceMax  atomic.Int64
	busyNs      atomic.Int64    // the poller's time awake (spinning or working), ended spans
	busySince   atomic.Int64    // when the poller woke (ns since t0), 0 while it sleeps
	byCall      []atomic.Uint64 // index in abi.Calls, then fastcalls, then unknown

	small [256]atomic.Uint64 // results by errno, below 256 (every Linux errno)

	mu     sync.Mutex
	errnos map[abi.Errno]uint64 // the rest (a hostile proxy's inventions)
}

func (s *stats) init() {
	s.byCall = make([]atomic.Uint64, len(abi.Calls)+2)
	s.errnos = map[abi.Errno]uint64{}
}

// tally is what a scan pass counts, flushed into stats at its end: the
// poller's path then makes no atomic add per call for them.
type tally struct {
	taken, hinted, ring uint64
	byCall              []uint64 // as stats.byCall
}

func (t *tally) count(sl *abi.Slot) {
	t.taken++
	switch i := abi.CallIndex(sl.Number); {
	case sl.Fastcall():
		t.byCall[len(abi.Calls)]++
	case i >= 0:
		t.byCall[i]++
	default:
		t.byCall[len(abi.Calls)+1]++
	}
}

// flushTally adds the pass's counts to the stats.
func (f *Forwarder) flushTally() {
	t := &f.tally
	if t.taken == 0 && t.hinted == 0 && t.ring == 0 {
		return
	}
	f.stats.taken.Add(t.taken)
	f.stats.hinted.Add(t.hinted)
	f.stats.ring.Add(t.ring)
	for i, n := range t.byCall {
		if n != 0 {
			f.stats.byCall[i].Add(n)
			t.byCall[i] = 0
		}
	}
	t.taken, t.hinted, t.ring = 0, 0, 0
}

// maxService raises serviceMax to d.
func (s *stats) maxService(d int64) {
	for m := s.serviceMax.Load(); d > m && !s.serviceMax.CompareAndSwap(m, d); m = s.serviceMax.Load() {
	}
}

func (s *stats) errno(e abi.Errno) {
	if e < abi.Errno(len(s.small)) {
		s.small[e].Add(1)
		return
	}
	s.mu.Lock()
	s.errnos[e]++
	s.mu.Unlock()
}

// Stats is a snapshot of a forwarder.
type Stats struct {
	// Calls counts the calls taken, by call name ("fastcall" for fastcall
	// slots, "unknown" for numbers outside the ABI).
	Calls map[string]uint64 `json:"calls"`
	// Errnos counts the results, by errno name ("OK" for success).
	Errnos        map[string]uint64 `json:"errnos"`
	InFlight      int               `json:"in_flight"`    // calls with the proxy now
	Batches       uint64            `json:"batches"`      // messages to the proxy
	NonBlocking   uint64            `json:"non_blocking"` // calls freed at once
	Fastcalls     uint64            `json:"fastcalls"`    // served by the forwarder itself
	Raced         uint64            `json:"raced"`        // slots rewritten between copy and take
	Lost          uint64            `json:"lost"`         // results the guest's rewrites kept out
	ProxyRestarts uint64            `json:"proxy_restarts"`
	ProxyState    string            `json:"proxy_state"`
	ProxyPID      int               `json:"proxy_pid,omitempty"`
	ProxyCPU      time.Duration     `json:"proxy_cpu_ns"`
	// The poller's view: scan passes and their time; blocking calls
	// finished and their time from the scan that saw them READY to
	// FINISHED written (the host's share of a round trip).
	ScanPasses  uint64        `json:"scan_passes"`
	ScanTime    time.Duration `json:"scan_ns"`
	FullScans   uint64        `json:"full_scans"`   // sweeps of every state word started (the passes read the ready map)
	Hinted      uint64        `json:"ready_hints"`  // READY slots found through their ready-map hint
	Ring        uint64        `json:"ring_calls"`   // calls read from the request ring
	RingBad     uint64        `json:"ring_bad"`     // ring entries naming no slot of the area (dropped)
	RingSkipped uint64        `json:"ring_skipped"` // ring positions claimed and never written, skipped
	Served      uint64        `json:"served"`
	ServiceTime time.Duration `json:"service_ns"`
	ServiceMax  time.Duration `json:"service_max_ns"`
	// PollerBusy is the time the poller was awake, spinning or working:
	// the core it held. Served / PollerBusy is what one poller core
	// serves.
	PollerBusy time.Duration `json:"poller_busy_ns"`
	Window     time.Duration `json:"window_ns"`
	Batch      int           `json:"batch"`
}

// Stats returns a snapshot.
func (f *Forwarder) Stats() Stats {
	s := Stats{
		Calls:         map[string]uint64{},
		Errnos:        map[string]uint64{},
		Batches:       f.stats.batches.Load(),
		NonBlocking:   f.stats.nonBlocking.Load(),
		Fastcalls:     f.stats.fastcalls.Load(),
		Raced:         f.stats.raced.Load(),
		Lost:          f.stats.lost.Load(),
		ProxyRestarts: f.stats.restarts.Load(),
		ScanPasses:    f.stats.passes.Load(),
		ScanTime:      time.Duration(f.stats.passNs.Load()),
		FullScans:     f.stats.fullScans.Load(),
		Hinted:        f.stats.hinted.Load(),
		Ring:          f.stats.ring.Load(),
		RingBad:       f.stats.ringBad.Load(),
		RingSkipped:   f.stats.ringSkipped.Load(),
		Served:        f.stats.served.Load(),
		ServiceTime:   time.Duration(f.stats.serviceNs.Load()),
		ServiceMax:    time.Duration(f.stats.serviceMax.Load()),
		PollerBusy:    time.Duration(f.stats.busyNs.Load()),
	}
	if since := f.stats.busySince.Load(); since != 0 {
		s.PollerBusy += time.Duration(f.now() - since)
	}
	cfg := f.cfg.Load()
	s.Window, s.Batch = cfg.Window, cfg.Batch
	for i := range f.stats.byCall {
		n := f.stats.byCall[i].Load()
		if n == 0 {
			continue
		}
		switch {
		case i < len(abi.Calls):
			s.Calls[abi.Calls[i].Name] = n
		case i == len(abi.Calls):
			s.Calls["fastcall"] = n
		default:
			s.Calls["unknown"] = n
		}
	}
	for e := range f.stats.small {
		if n := f.stats.small[e].Load(); n > 0 {
			s.Errnos[abi.Errno(e).Name()] = n
		}
	}
	f.stats.mu.Lock()
	for e, n := range f.stats.errnos {
		s.Errnos[e.Name()] = n
	}
	f.stats.mu.Unlock()
	f.mu.Lock()
	s.InFlight, s.ProxyState = f.nIn, f.state
	p := f.proxy
	f.mu.Unlock()
	if p != nil {
		s.ProxyPID, s.ProxyCPU = p.Pid(), p.CPUTime()
	}
	return s
}
