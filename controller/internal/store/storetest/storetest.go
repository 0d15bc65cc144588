// Package storetest is the conformance suite of the controller's stores
// (controller/internal/store/sqlite, controller/internal/store/postgres):
// Run runs every case against a store given a way to make a fresh database,
// so that each implementation is held to the same behaviour, concurrency
// included.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-gpu/sluice/controller/internal/fleet"
	"github.com/sluice-gpu/sluice/controller/internal/server"
)

// Store is what the suite tests: the server's Store plus what the
// implementations have beside it.
type Store interface {
	server.Store
	CountTokens(ctx context.Context) (int, error)
	SchemaVersion(ctx context.Context) (int, error)
	Close() error
}

// DB is a fresh, empty database of the implementation under test.
type DB struct {
	// Open opens a Store on the database. Each call opens another, so a
	// case can reopen the database (a restart) or use two stores at once
	// (two controllers). Stores still open are closed when the test ends.
	Open func(t *testing.T) Store
	// Migrations is the number of schema versions the implementation has.
	Migrations int
}

// Run runs every case, each on a database newDB makes.
func Run(t *testing.T, newDB func(t *testing.T) DB) {
	cases := []struct {
		name string
		fn   func(*testing.T, DB)
	}{
		{"MigrationsApplyOnceAndSurviveReopen", testMigrationsApplyOnceAndSurviveReopen},
		{"TokensRevokeOnceAndLookUpByHash", testTokensRevokeOnceAndLookUpByHash},
		{"RegisterHostKeepsPlacedGPUs", testRegisterHostKeepsPlacedGPUs},
		{"GPUInventoryFields", testGPUInventoryFields},
		{"HeartbeatAndMarkDown", testHeartbeatAndMarkDown},
		{"UsageIngestionIsIdempotentAcrossReopen", testUsageIngestionIsIdempotentAcrossReopen},
		{"UpdateAndDeleteVM", testUpdateAndDeleteVM},
		{"DrainAndDeleteHost", testDrainAndDeleteHost},
		{"EndpointsSurviveReopen", testEndpointsSurviveReopen},
		{"ConcurrentIngestionCountsOnce", testConcurrentIngestionCountsOnce},
		{"ConcurrentCreateOfOneNameCreatesOnce", testConcurrentCreateOfOneNameCreatesOnce},
		{"CapacityLockExcludesAcrossStores", testCapacityLockExcludesAcrossStores},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newDB(t)) })
	}
}

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func ev(action, target string) fleet.Event {
	return fleet.Event{Time: t0, Actor: "test", Action: action, Target: target}
}

func hostWithGPUs(name string, mem ...int64) fleet.Host {
	h := fleet.Host{Name: name, Address: name + ":1", Registered: t0, LastHeartbeat: t0}
	for i, m := range mem {
		h.GPUs = append(h.GPUs, fleet.GPU{Host: name, Index: i, Model: "sim", MemoryBytes: m})
	}
	return h
}
