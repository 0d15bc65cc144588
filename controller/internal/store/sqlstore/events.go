package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
)

// insertEvent records ev in the transaction of the change it describes.
func insertEvent(ctx context.Context, c conn, ev fleet.Event) error {
	_, err := c.exec(ctx, `INSERT INTO events (time, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)`,
		nanos(ev.Time), ev.Actor, ev.Action, ev.Target, ev.Detail)
	if err != nil {
		return fmt.Errorf("recording event %s: %w", ev.Action, err)
	}
	return nil
}

// AddEvent records an event on its own.
func (s *Store) AddEvent(ctx context.Context, ev fleet.Event) error {
	return s.change(ctx, func(c conn) error { return insertEvent(ctx, c, ev) })
}

// ListEvents returns up to limit events at or after since, newest first.
func (s *Store) ListEvents(ctx context.Context, since time.Time, limit int) ([]fleet.Event, error) {
	rows, err := s.read().query(ctx, `SELECT id, time, actor, action, target, detail FROM events
		WHERE time >= ? ORDER BY id DESC LIMIT ?`, nanos(since), limit)
	return scanAll(rows, err, "listing events", "an event", func(row scanner) (fleet.Event, error) {
		var ev fleet.Event
		var t int64
		err := row.Scan(&ev.ID, &t, &ev.Actor, &ev.Action, &ev.Target, &ev.Detail)
		ev.Time = fromNanos(t)
		return ev, err
	})
}
