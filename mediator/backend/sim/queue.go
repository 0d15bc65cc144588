package sim

// ring is a growable FIFO that reuses its storage, so that steady-state
// queuing allocates nothing.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		nb := make([]T, max(8, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// front is the oldest element; the ring must not be empty.
func (r *ring[T]) front() *T { return &r.buf[r.head] }

// at is the i-th element from the front (i < len).
func (r *ring[T]) at(i int) T { return r.buf[(r.head+i)%len(r.buf)] }

// popFront removes and returns the oldest element; the ring must not be
// empty.
func (r *ring[T]) popFront() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // drop references for the collector
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

type eventKind uint8

const (
	evEngine eventKind = iota // the command on engine eng ends
	evTimer                   // an After function is due
)

// event is one point on the timeline. Events at equal times fire in seq
// order, the order they were created, which makes runs deterministic.
type event struct {
	t    int64
	seq  uint64
	fn   func()
	eng  Engine
	kind eventKind
}

// eventHeap is a binary min-heap by (t, seq), hand-written so that pushing
// and popping box nothing.
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	return h[i].t < h[j].t || (h[i].t == h[j].t && h[i].seq < h[j].seq)
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = event{}
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s.less(l, m) {
			m = l
		}
		if r < len(s) && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
