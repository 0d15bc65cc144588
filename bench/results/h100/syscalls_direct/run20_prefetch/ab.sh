#!/usr/bin/env bash
# ab.sh OUT ROUNDS AGENT:CALLER[:ENV=V]...: interleaved rounds; per spec: sluiced (AGENT/ if it has one, else cur/) on cuda, one VM,
# sluice-agent (AGENT/) syscall-bench --caller CALLER: 1024 callers x CALLS calls, then 1 caller x 20000.
set -u
x=$(dirname "$0"); out=$1 rounds=$2; shift 2; mkdir -p $out
for r in $(seq $rounds); do for spec in "$@"; do IFS=: read -r a unit envs <<<"$spec"; tag=$a-$unit${envs:+-${envs//=/_}}
  o=$out/$tag-r$r; mkdir -p $o
  dir=$(mktemp -d /tmp/sluice-ab-XXXXXX); chmod 711 $dir
  export SLUICE_SOCKET=$dir/sluiced.sock
  srv=$x/cur; [ -x $x/$a/sluiced ] && srv=$x/$a
  pin=""; case "$envs" in PIN=*) pin="taskset -c ${envs#PIN=}"; envs="";; esac
  $pin env $envs $srv/sluiced --backend cuda --max-command 30s --socket $SLUICE_SOCKET --state-dir $dir/state >$o/sluiced.log 2>&1 &
  daemon=$!
  for _ in $(seq 100); do [ -S $SLUICE_SOCKET ] && break; sleep 0.1; done
  ep=$($srv/sluicectl vm create bench --channels 4 --region-size 256MiB)
  sleep 1
  $srv/sluicectl vm get bench --json > $o/vm0.json
  timeout 100 $x/$a/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 2 --caller $unit --callers 1024 --calls ${CALLS:-4096000} > $o/n1024.json
  $srv/sluicectl vm get bench --json > $o/vm1.json
  timeout 100 $x/$a/sluice-agent --endpoint "$ep" run syscall-bench --backend cuda --json --channel 1 --callers 1 --calls 20000 > $o/n1.json
  kill $daemon; wait $daemon; rm -rf $dir
  python3 - $o $tag $r <<'PY'
import json,sys
o,b,r=sys.argv[1:]
try:
  v0=json.load(open(o+'/vm0.json'))['syscalls']; v1=json.load(open(o+'/vm1.json'))['syscalls']
  n=json.load(open(o+'/n1024.json'))['null'][0]; one=json.load(open(o+'/n1.json'))['null'][0]
except Exception as e:
  print(f"{b} r{r}: failed: {e}"); sys.exit()
scan=v1['scan_ns']-v0['scan_ns']; taken=sum(v1['calls'].values())-sum(v0['calls'].values())
bp=v1['batches']-v0['batches']; sp=v1['scan_passes']-v0['scan_passes']
print(f"{b} r{r}: 1024 {n['calls_per_s']/1e6:.2f} M/s p50 {n['p50_ns']/1e3:.1f} us  poller {scan/max(taken,1):.0f} ns/call  {taken/max(bp,1):.0f} calls/batch, {100*(sp-bp)/max(sp,1):.0f}% passes empty | 1 caller p50 {one['p50_ns']/1e3:.2f} us p99 {one['p99_ns']/1e3:.2f}")
PY
done; done 2>&1 | tee $out/summary.txt
