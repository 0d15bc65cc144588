package postgres

import "github.com/sluice-gpu/sluice/controller/internal/store/sqlstore"

// migrations are the schema's versions, applied in order, each once, in a
// transaction with its row in schema_migrations. Never change one that has
// shipped: add the next. They follow the SQLite store's versions one for
// one (controller/internal/store/sqlite/migrations.go), in PostgreSQL's
// types: times are Unix nanoseconds (BIGINT), as there.
var migrations = []string{
	// 1: tokens, hosts, GPUs, VMs, usage, events.
	`CREATE TABLE tokens (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		role TEXT NOT NULL CHECK (role IN ('operator', 'tenant', 'host')),
		tenant TEXT NOT NULL DEFAULT '',
		host TEXT NOT NULL DEFAULT '',
		hash BYTEA NOT NULL UNIQUE,
		created BIGINT NOT NULL,
		created_by TEXT NOT NULL,
		revoked BIGINT NOT NULL DEFAULT 0
	);
	CREATE TABLE hosts (
		name TEXT PRIMARY KEY,
		address TEXT NOT NULL,
		version TEXT NOT NULL,
		registered BIGINT NOT NULL,
		last_heartbeat BIGINT NOT NULL,
		down BOOLEAN NOT NULL DEFAULT FALSE
	);
	CREATE TABLE gpus (
		host TEXT NOT NULL REFERENCES hosts(name),
		idx INTEGER NOT NULL,
		model TEXT NOT NULL,
		memory_bytes BIGINT NOT NULL,
		PRIMARY KEY (host, idx)
	);
	CREATE TABLE vms (
		name TEXT PRIMARY KEY,
		tenant TEXT NOT NULL,
		weight BIGINT NOT NULL,
		cap DOUBLE PRECISION NOT NULL,
		memory_bytes BIGINT NOT NULL,
		host TEXT NOT NULL,
		gpu INTEGER NOT NULL,
		created BIGINT NOT NULL,
		updated BIGINT NOT NULL,
		generation BIGINT NOT NULL,
		FOREIGN KEY (host, gpu) REFERENCES gpus(host, idx)
	);
	CREATE INDEX vms_tenant ON vms(tenant);
	CREATE INDEX vms_place ON vms(host, gpu);
	CREATE TABLE usage (
		host TEXT NOT NULL,
		vm TEXT NOT NULL,
		seq BIGINT NOT NULL,
		tenant TEXT NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL,
		gpu_ns BIGINT NOT NULL CHECK (gpu_ns >= 0),
		kernels BIGINT NOT NULL CHECK (kernels >= 0),
		PRIMARY KEY (host, vm, seq)
	);
	CREATE INDEX usage_vm ON usage(vm, end_ns);
	CREATE INDEX usage_tenant ON usage(tenant, end_ns);
	CREATE INDEX usage_end ON usage(end_ns);
	CREATE TABLE events (
		id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		time BIGINT NOT NULL,
		actor TEXT NOT NULL,
		action TEXT NOT NULL,
		target TEXT NOT NULL,
		detail TEXT NOT NULL
	);`,
	// 2: the GPUs' PCI inventory read from sysfs (issue 13); NULL or '':
	// absent (a declared GPU), which is not 0.
	`ALTER TABLE gpus ADD COLUMN pci_address TEXT NOT NULL DEFAULT '';
	ALTER TABLE gpus ADD COLUMN numa_node INTEGER;
	ALTER TABLE gpus ADD COLUMN driver TEXT NOT NULL DEFAULT '';
	ALTER TABLE gpus ADD COLUMN iommu_group INTEGER;
	ALTER TABLE gpus ADD COLUMN sriov_totalvfs INTEGER;
	ALTER TABLE gpus ADD COLUMN sriov_numvfs INTEGER;
	ALTER TABLE gpus ADD COLUMN vfs TEXT NOT NULL DEFAULT '[]';`,
	// 3: a draining host takes no new VMs.
	`ALTER TABLE hosts ADD COLUMN draining BOOLEAN NOT NULL DEFAULT FALSE;`,
	// 4: the endpoints the hosts report of their VMs, for domain.xml.
	sqlstore.MigrationEndpoints,
}
