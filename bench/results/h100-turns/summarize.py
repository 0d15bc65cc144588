import json,sys,glob,os
def kinds(v):
    k=v.get('bill_kinds_ns')
    if not k: return ''
    t=v.get('true_gpu_ns') or 1
    return f" [alone {k['alone']/1e6:.0f} traced {k['traced']/1e6:.0f} even {k['even']/1e6:.0f} tracer {100*(k['tracer']/t-1):+.1f}% of true outs {k.get('switches_out',0)}]"
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    r=json.load(open(f))
    vms=" ".join(f"{v['name']}:{100*v.get('share',0):.1f}%/bill{100*(v.get('accounting_error') or 0):+.1f}%/p50 {v.get('latency_p50_ns',0)/1e3:.0f}us/p99 {v.get('latency_p99_ns',0)/1e3:.0f}us/k{v.get('kernels',0)}{kinds(v)}" for v in r['vms'])
    nat=r.get('native') or {}
    vn=nat.get('vs_native_busy'); vn=f"{vn:.3f}" if vn else "-"
    arb=r.get('arbitration') or 'driver'
    if arb=='auto':
        arb=f"auto->{r.get('arbitration_in_force')} switches {r.get('arbitration_switches',0)} turns-periods {r.get('turns_periods',0)}/{r.get('periods',0)}"
    tr=f" traced {r.get('traced_ns',0)/1e6:.0f}ms switch {r.get('switch_overhead_ns',0)/1e6:.0f}ms" if 'traced_ns' in r else ''
    print(f"{os.path.basename(f)[:-5]}: [{arb}]{tr} jain {r['jain_index']:.3f} util {100*r['utilization']:.1f}% overhead {r.get('gpu_overhead_ns',0)/1e6:.0f}ms vms-in-flight {r.get('max_vms_in_flight')} vs-native {vn} | {vms}")
