package server

import (
	"context"
	"fmt"
)

// CapacityLocker is a Store that several controllers may share (the
// PostgreSQL store): LockCapacity waits until no other controller on the
// database runs a capacity-dependent change and keeps them out until
// unlock is called. A Store without it is owned by one controller process,
// and the server's mutex is enough.
type CapacityLocker interface {
	LockCapacity(ctx context.Context) (unlock func(), err error)
}

// lockCapacity serialises the changes that read capacity and then place a
// VM (create, move, a memory change, a registration): in this process and,
// when the store is shared, across every controller on the database, so
// that two controllers never place into the same room.
func (s *Server) lockCapacity(ctx context.Context) (unlock func(), err error) {
	s.mu.Lock()
	l, ok := s.cfg.Store.(CapacityLocker)
	if !ok {
		return s.mu.Unlock, nil
	}
	release, err := l.LockCapacity(ctx)
	if err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("taking the capacity lock: %w", err)
	}
	return func() { release(); s.mu.Unlock() }, nil
}
