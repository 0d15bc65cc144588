package qmp

import "slices"

// SubscriberBuffer is how many undelivered events a subscription holds;
// further events for it are dropped and counted by DroppedEvents.
const SubscriberBuffer = 64

// maxHandshakeEvents bounds what HandshakeEvents keeps.
const maxHandshakeEvents = SubscriberBuffer

type subscription struct {
	names []string // empty: all
	ch    chan Event
}

// Subscribe returns a channel of the events with the given names (all events
// if none), from now on, and a func that ends the subscription and closes
// the channel. The channel is also closed when the connection is lost.
//
// Subscribe before sending the command whose events you want: an event that
// arrives before Subscribe returns is not delivered. Read the channel
// promptly; it holds SubscriberBuffer events and drops the rest.
func (m *Monitor) Subscribe(names ...string) (<-chan Event, func()) {
	s := &subscription{names: slices.Clone(names), ch: make(chan Event, SubscriberBuffer)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		close(s.ch)
		return s.ch, func() {}
	}
	m.subs[s] = struct{}{}
	return s.ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[s]; ok {
			delete(m.subs, s)
			close(s.ch)
		}
	}
}

// HandshakeEvents returns the events that arrived while Dial was
// negotiating, before anyone could subscribe (at most SubscriberBuffer).
func (m *Monitor) HandshakeEvents() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.early)
}

// DroppedEvents counts the events dropped because a subscriber's buffer was
// full (each subscriber counting once), since the connection opened.
func (m *Monitor) DroppedEvents() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

// dispatch hands an event to its subscribers without ever waiting.
func (m *Monitor) dispatch(e Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.handshaking {
		if len(m.early) < maxHandshakeEvents {
			m.early = append(m.early, e)
		} else {
			m.dropped++
		}
		return
	}
	for s := range m.subs {
		if len(s.names) > 0 && !slices.Contains(s.names, e.Name) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			m.dropped++
		}
	}
}
