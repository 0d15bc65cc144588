for f in bench/specs/*.yaml; do s=$(basename $f .yaml)
  for b in base new; do timeout 120 /tmp/sl_$b bench run $f --json > /tmp/cmp-$b-$s.json 2>/dev/null || echo "FAIL $b $s"; done
  python3 - $s <<'PY'
import json,sys
s=sys.argv[1]
try:
  a=json.load(open(f'/tmp/cmp-base-{s}.json')); b=json.load(open(f'/tmp/cmp-new-{s}.json'))
except Exception as e:
  print(s,'ERR',e); sys.exit()
d=[]
for x,y in zip(a['vms'],b['vms']):
  if abs(x.get('share',0)-y.get('share',0))>0.005 or abs((x.get('latency_p99_ns') or 0)-(y.get('latency_p99_ns') or 0))>max(1e6,0.1*(x.get('latency_p99_ns') or 0)):
    d.append(f"{x['name']}: share {100*x.get('share',0):.1f}->{100*y.get('share',0):.1f} p99 {x.get('latency_p99_ns',0)/1e6:.1f}->{y.get('latency_p99_ns',0)/1e6:.1f}ms")
print(s, 'jain %.4f->%.4f'%(a['jain_index'],b['jain_index']), '; '.join(d) if d else 'same')
PY
done
