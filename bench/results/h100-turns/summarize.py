import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    r=json.load(open(f))
    vms=" ".join(f"{v['name']}:{100*v.get('share',0):.1f}%/bill{100*(v.get('accounting_error') or 0):+.1f}%/p50 {v.get('latency_p50_ns',0)/1e3:.0f}us/p99 {v.get('latency_p99_ns',0)/1e3:.0f}us/k{v.get('kernels',0)}" for v in r['vms'])
    nat=r.get('native') or {}
    vn=nat.get('vs_native_busy'); vn=f"{vn:.3f}" if vn else "-"
    arb=r.get('arbitration') or 'driver'
    if arb=='auto':
        arb=f"auto->{r.get('arbitration_in_force')} switches {r.get('arbitration_switches',0)} turns-periods {r.get('turns_periods',0)}/{r.get('periods',0)}"
    print(f"{os.path.basename(f)[:-5]}: [{arb}] jain {r['jain_index']:.3f} util {100*r['utilization']:.1f}% overhead {r.get('gpu_overhead_ns',0)/1e6:.0f}ms vms-in-flight {r.get('max_vms_in_flight')} vs-native {vn} | {vms}")
