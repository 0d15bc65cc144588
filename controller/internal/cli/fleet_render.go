package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gpu/sluice/api/controllerapi"
)

func i64(n int64) string { return strconv.FormatInt(n, 10) }

func opt(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return clean(*s)
}

func memCell(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strings.ReplaceAll(FormatSize(uint64(n)), " ", "")
}

// RenderHostTable renders hosts as the "host list" table.
func RenderHostTable(hosts []controllerapi.Host) string {
	cols := []column{{title: "NAME"}, {title: "STATE"}, {title: "GPUS", right: true}, {title: "VMS", right: true},
		{title: "ADDRESS"}, {title: "VERSION"}, {title: "LAST HEARTBEAT"}}
	rows := make([][]string, 0, len(hosts))
	for _, h := range hosts {
		rows = append(rows, []string{clean(h.Name), hostState(h), strconv.Itoa(len(h.Gpus)), strconv.Itoa(h.Vms),
			clean(h.Address), opt(h.Version), formatTime(h.LastHeartbeat)})
	}
	return renderTable(cols, rows)
}

// hostState is a host's STATE cell: up or down, and ",draining" when an
// operator drains it.
func hostState(h controllerapi.Host) string {
	if h.Draining {
		return clean(string(h.State)) + ",draining"
	}
	return clean(string(h.State))
}

// RenderGPUTable renders GPUs as the "gpu list" table.
func RenderGPUTable(gpus []controllerapi.GPU) string {
	cols := []column{{title: "HOST"}, {title: "GPU", right: true}, {title: "MODEL"}, {title: "MEMORY", right: true},
		{title: "PLACED", right: true}, {title: "VMS", right: true}, {title: "PCI"}, {title: "NUMA", right: true},
		{title: "DRIVER"}, {title: "IOMMU", right: true}, {title: "SR-IOV"}, {title: "VFS"}}
	rows := make([][]string, 0, len(gpus))
	for _, g := range gpus {
		sriov := "-" // not an SR-IOV physical function (or declared)
		if g.SriovTotalvfs != nil || g.SriovNumvfs != nil {
			sriov = optInt(g.SriovNumvfs) + "/" + optInt(g.SriovTotalvfs)
		}
		vfs := "-"
		if g.Vfs != nil && len(*g.Vfs) > 0 {
			var b strings.Builder
			for i, vf := range *g.Vfs {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(clean(vf.Address))
				if vf.Driver != nil {
					b.WriteString("(" + clean(*vf.Driver) + ")")
				}
			}
			vfs = b.String()
		}
		rows = append(rows, []string{clean(g.Host), strconv.Itoa(g.Index), clean(g.Model), memCell(g.MemoryBytes),
			memCell(g.MemoryPlacedBytes), strconv.Itoa(g.Vms), optStr(g.PciAddress), optInt(g.NumaNode),
			optStr(g.Driver), optInt(g.IommuGroup), sriov, vfs})
	}
	return renderTable(cols, rows)
}

// optInt and optStr show an absent field as "-" (apart from 0).
func optInt(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func optStr(p *string) string {
	if p == nil || *p == "" {
		return "-"
	}
	return clean(*p)
}

// RenderFleetVMTable renders the controller's VMs as the "vm list" table.
func RenderFleetVMTable(vms []controllerapi.VM) string {
	cols := []column{{title: "NAME"}, {title: "TENANT"}, {title: "HOST"}, {title: "GPU", right: true},
		{title: "WEIGHT", right: true}, {title: "CAP", right: true}, {title: "MEMORY", right: true}, {title: "GEN", right: true}, {title: "STATE"}}
	rows := make([][]string, 0, len(vms))
	for _, v := range vms {
		rows = append(rows, []string{clean(v.Name), clean(v.Tenant), clean(v.Host), strconv.Itoa(v.Gpu), i64(v.Weight),
			capCell(v.Cap), memCell(v.MemoryBytes), i64(v.Generation), vmState(v)})
	}
	return renderTable(cols, rows)
}

func vmState(v controllerapi.VM) string {
	if v.HostDown {
		return "host-down"
	}
	return "placed"
}

// RenderFleetVM renders one of the controller's VMs for "vm get".
func RenderFleetVM(v controllerapi.VM) string {
	return renderFields([][2]string{
		{"Name", clean(v.Name)},
		{"Tenant", clean(v.Tenant)},
		{"Host", clean(v.Host)},
		{"GPU", strconv.Itoa(v.Gpu)},
		{"State", vmState(v)},
		{"Weight", i64(v.Weight)},
		{"Cap", capCell(v.Cap)},
		{"Memory", memCell(v.MemoryBytes)},
		{"Generation", i64(v.Generation)},
		{"Created", formatTime(v.Created)},
		{"Updated", formatTime(v.Updated)},
	})
}

// RenderTokenTable renders tokens as the "token list" table.
func RenderTokenTable(toks []controllerapi.Token) string {
	cols := []column{{title: "ID"}, {title: "NAME"}, {title: "ROLE"}, {title: "SCOPE"}, {title: "CREATED"}, {title: "CREATED BY"}, {title: "REVOKED"}}
	rows := make([][]string, 0, len(toks))
	for _, t := range toks {
		scope := "-"
		if t.Tenant != nil {
			scope = "tenant " + clean(*t.Tenant)
		} else if t.Host != nil {
			scope = "host " + clean(*t.Host)
		}
		revoked := "-"
		if t.Revoked != nil {
			revoked = formatTime(*t.Revoked)
		}
		rows = append(rows, []string{clean(t.Id), clean(t.Name), clean(string(t.Role)), scope, formatTime(t.Created), clean(t.CreatedBy), revoked})
	}
	return renderTable(cols, rows)
}

// RenderUsageTable renders a usage report: one row per interval and a total.
func RenderUsageTable(u controllerapi.UsageReport) string {
	cols := []column{{title: "HOST"}, {title: "VM"}, {title: "TENANT"}, {title: "SEQ", right: true}, {title: "START"},
		{title: "END"}, {title: "GPU TIME", right: true}, {title: "KERNELS", right: true}}
	rows := make([][]string, 0, len(u.Intervals)+1)
	for _, r := range u.Intervals {
		rows = append(rows, []string{clean(r.Host), clean(r.Vm), clean(r.Tenant), i64(r.Seq), formatTime(r.Start), formatTime(r.End),
			time.Duration(r.GpuNs).String(), i64(r.Kernels)})
	}
	rows = append(rows, []string{"TOTAL", "", "", "", "", "", time.Duration(u.TotalGpuNs).String(), i64(u.TotalKernels)})
	return renderTable(cols, rows) + fmt.Sprintf("%d intervals, %d ns of GPU time\n", len(u.Intervals), u.TotalGpuNs)
}

// RenderEventTable renders audit events.
func RenderEventTable(evs []controllerapi.Event) string {
	cols := []column{{title: "ID", right: true}, {title: "TIME"}, {title: "ACTOR"}, {title: "ACTION"}, {title: "TARGET"}, {title: "DETAIL"}}
	rows := make([][]string, 0, len(evs))
	for _, e := range evs {
		rows = append(rows, []string{i64(e.Id), formatTime(e.Time), clean(e.Actor), clean(e.Action), clean(e.Target), opt(e.Detail)})
	}
	return renderTable(cols, rows)
}
