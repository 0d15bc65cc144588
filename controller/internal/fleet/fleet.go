// Package fleet holds the controller's domain types: tokens, hosts and their
// GPUs, VMs, usage intervals and audit events, and the sentinel errors the
// store returns. The HTTP layer (controller/internal/server) maps them to
// the API's types and error codes once; the store
// (controller/internal/store/sqlite) persists them.
package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors of the store and the server. Wrap them with context; the
// HTTP boundary maps each to one status and error code.
var (
	ErrNotFound   = errors.New("not found")
	ErrExists     = errors.New("already exists")
	ErrConflict   = errors.New("conflict")
	ErrNoCapacity = errors.New("no GPU has room")
)

// Role is what a token may do.
type Role string

// Roles.
const (
	RoleOperator Role = "operator" // everything
	RoleTenant   Role = "tenant"   // its tenant's VMs and usage
	RoleHost     Role = "host"     // one sluiced: register, heartbeat, push usage
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleOperator || r == RoleTenant || r == RoleHost }

// Token is a bearer token as stored: its secret only as a hash.
type Token struct {
	ID        string
	Name      string
	Role      Role
	Tenant    string // role tenant: the tenant
	Host      string // role host: the host
	Hash      []byte // SHA-256 of the secret
	Created   time.Time
	CreatedBy string
	Revoked   time.Time // zero while it works
}

// Host is a machine running sluiced.
type Host struct {
	Name          string
	Address       string
	Version       string
	Registered    time.Time
	LastHeartbeat time.Time
	Down          bool // missed its heartbeats
	Draining      bool // takes no new VMs; those on it stay until moved
	GPUs          []GPU
}

// GPU is one GPU of a host as the host reported it. The PCI fields are what
// the host read from sysfs (mediator/internal/gpuinv); a host that declares
// its GPUs leaves them absent: "" and nil, which is not 0.
type GPU struct {
	Host          string
	Index         int
	Model         string
	MemoryBytes   int64
	PCIAddress    string // DDDD:BB:DD.F
	NUMANode      *int
	Driver        string
	IOMMUGroup    *int
	SRIOVTotalVFs *int
	SRIOVNumVFs   *int
	VFs           []VF
}

// VF is a virtual function of an SR-IOV GPU.
type VF struct {
	Address string `json:"address"`
	Driver  string `json:"driver,omitempty"`
}

// EncodeVFs is how the stores keep a GPU's VFs: a JSON array ("[]" for none).
func EncodeVFs(vfs []VF) string {
	if len(vfs) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(vfs) // strings only: cannot fail
	return string(b)
}

// DecodeVFs reads what EncodeVFs wrote; none is nil.
func DecodeVFs(s string) ([]VF, error) {
	var vfs []VF
	if err := json.Unmarshal([]byte(s), &vfs); err != nil {
		return nil, fmt.Errorf("a GPU's VFs %q: %w", s, err)
	}
	if len(vfs) == 0 {
		return nil, nil
	}
	return vfs, nil
}

// Endpoint is what a host last reported of a VM it runs: the device a
// libvirt domain needs (the ivshmem server socket, MSI vectors, volume,
// settings). It is the host's run-time state, reported again every
// interval; the store keeps it whole, so that a restarted controller, or
// another one on the same database, answers the VM's domain.xml.
type Endpoint struct {
	Host   string
	VM     string
	Report string // JSON: the API's VMEndpoint as the host sent it
}

// VM is a VM's desired settings and place.
type VM struct {
	Name        string
	Tenant      string
	Weight      int64
	Cap         float64 // 0: none
	MemoryBytes int64   // 0: no quota
	Host        string
	GPU         int
	Created     time.Time
	Updated     time.Time
	Generation  int64 // grows with every change
}

// UsageInterval is a VM's GPU time over one interval as a host measured it.
// Host, VM and Seq are its idempotency key.
type UsageInterval struct {
	Host    string
	VM      string
	Tenant  string // the VM's tenant when it was ingested
	Seq     int64
	Start   time.Time
	End     time.Time
	GPUNs   int64
	Kernels int64
}

// SameContent reports whether u and v carry the same measurement (a
// redelivery), whatever their tenant.
func (u UsageInterval) SameContent(v UsageInterval) bool {
	return u.Host == v.Host && u.VM == v.VM && u.Seq == v.Seq && u.Start.Equal(v.Start) &&
		u.End.Equal(v.End) && u.GPUNs == v.GPUNs && u.Kernels == v.Kernels
}

// UsageQuery selects intervals; zero fields select everything.
type UsageQuery struct {
	VM     string
	Tenant string
	From   time.Time // intervals that end after From
	To     time.Time // intervals that start before To
}

// Event is one entry of the audit log.
type Event struct {
	ID     int64
	Time   time.Time
	Actor  string
	Action string
	Target string
	Detail string
}

// IntervalError is the failure of one interval of a usage batch.
type IntervalError struct {
	Index int // in the batch
	Err   error
}

func (e *IntervalError) Error() string { return fmt.Sprintf("interval %d: %v", e.Index, e.Err) }
func (e *IntervalError) Unwrap() error { return e.Err }
