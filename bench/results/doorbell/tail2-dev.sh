#!/bin/bash
# dev.sh OUT: NOP round trips of a process guest on sluiced's null backend
# against the raw polling floor (bellbench floor), several rounds. No GPU
# needed. build.sh makes the binaries: .devbin/h8/before (main when the
# work began) and .devbin/h8/after (the tail2 branch), sluiced and
# sluice-agent each.
#
# First, bellbench yield: what a runtime.Gosched costs a spinning goroutine
# on this host (the mechanism). Then each round runs, in an order that
# rotates from round to round:
#   floor                    bellbench floor
#   nop-H-G  (4 runs)        sluiced of H with sluice-agent of G, H and G
#                            each before or after: which side's change
#                            moves the tail (the ABI is the same);
#   causes-H (2 runs)        the after agent with --causes against H's
#                            sluiced: each round trip classed by what the
#                            guest saw (slept, rang, away, yielded, spun;
#                            the waits read the clock on every look, so
#                            these runs are not the A/B); the after
#                            sluiced also writes its spin trace
#                            (SLUICE_SPIN_TRACE: the gaps between its looks
#                            at the ring, OUT/spin/).
# Last, a CPU profile of each sluiced over 1000000 NOPs (OUT/cpu-*.pprof).
# Prints a summary table and writes OUT/dev.log (every JSON line) and
# OUT/summary.txt.
# Env: ROUNDS (8), COUNT (50000 measured round trips a run), WARMUP (2000).
set -u
OUT=${1:?usage: dev.sh OUT}
mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-8}
COUNT=${COUNT:-50000}
WARMUP=${WARMUP:-2000}
T=$(mktemp -d /tmp/h8dev.XXXX)
trap 'rm -rf "$T"' EXIT
# The binaries travel gzipped (the size limit); unpack them once.
for v in before after; do
  mkdir -p "$T/$v"
  for b in sluiced sluice-agent; do gzip -dc "$HERE/$v/$b.gz" > "$T/$v/$b"; chmod +x "$T/$v/$b"; done
done
gzip -dc "$HERE/bellbench.gz" > "$T/bellbench"; chmod +x "$T/bellbench"
LOG=$OUT/dev.log
{ nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; cat /proc/loadavg /sys/devices/system/clocksource/clocksource0/current_clocksource
  lscpu | grep -Ei '^(socket|core|thread|numa|l3|cpu\(s\))'; } > "$LOG" 2>&1

# mkvm SOCK NAME: create a one-channel VM through the host API, print its endpoint.
mkvm() {
  python3 - "$1" "$2" <<'EOF'
import http.client, json, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])
c = C("sluiced")
c.request("POST", "/v1/vms", json.dumps({"name": sys.argv[2], "channels": 1}), {"Content-Type": "application/json"})
r = c.getresponse(); b = r.read()
if r.status != 201: sys.exit("create vm: %d %s" % (r.status, b))
print(json.loads(b)["endpoint"])
EOF
}

# nop H G NAME ROUND [AGENT FLAGS]: one run of the NOP latency workload,
# sluiced of H, sluice-agent of G, logged as NAME.
nop() {
  local h=$1 g=$2 name=$3 round=$4 d p ep res
  shift 4
  d=$(mktemp -d "$T/run.XXXX")
  env ${SLUICED_ENV:-} "$T/$h/sluiced" --socket "$d/s.sock" --state-dir "$d/st" --backend null --proxy off --log-level warn 2>"$d/log" & p=$!
  for _ in $(seq 100); do [ -S "$d/s.sock" ] && break; sleep 0.05; done
  ep=$(mkvm "$d/s.sock" lat) || { kill $p; wait $p; return; }
  res=$("$T/$g/sluice-agent" --endpoint "$ep" run latency --count "$COUNT" --warmup "$WARMUP" --json "$@" | tr -d ' \n')
  kill $p; wait $p 2>/dev/null
  echo "round $round $name $res" >> "$LOG"
  rm -rf "$d"
}

# The mechanism: what one runtime.Gosched costs a goroutine that spins
# between yields (bellbench yield), every 300 ns (the SDK's waiter yielded
# every 64 looks) and every 1 µs (the doorbell goroutine every 16 looks).
for e in 300ns 1us; do
  echo "round 0 yield-$e $("$T/bellbench" yield --count 50000 --every "$e" | tr -d ' \n')" >> "$LOG"
done

cases=(floor nop-before-before nop-after-after nop-before-after nop-after-before causes-before causes-after)
for r in $(seq "$ROUNDS"); do
  n=${#cases[@]}
  for i in $(seq 0 $((n - 1))); do
    c=${cases[$(((i + r - 1) % n))]}
    case $c in
      floor) echo "round $r floor $("$T/bellbench" floor --count "$COUNT" --warmup "$WARMUP" | tr -d ' \n')" >> "$LOG" ;;
      nop-*) IFS=- read -r _ h g <<< "$c"; nop "$h" "$g" "$c" "$r" ;;
      causes-*)
        h=${c#causes-}; mkdir -p "$OUT/spin/$h.$r"
        SLUICED_ENV="SLUICE_SPIN_TRACE=$OUT/spin/$h.$r" nop "$h" after "$c" "$r" --causes
        [ -f "$OUT/spin/$h.$r/spin-lat.json" ] && echo "round $r spin-$h $(tr -d ' \n' < "$OUT/spin/$h.$r/spin-lat.json")" >> "$LOG" ;;
    esac
  done
  echo "round $r done" >&2
done

# CPU profiles of each sluiced (with its own agent) over 1000000 NOPs:
# where the doorbell goroutine's time goes (go tool pprof -top FILE; the
# profile names its functions itself).
for v in before after; do
  COUNT=1000000 SLUICED_ENV="SLUICE_CPU_PROFILE=$OUT/cpu-$v.pprof" nop "$v" "$v" "profile-$v" 0
done

# Summary: per round, the floor's p50 and each case's p50, p90, p99, max
# (µs), p99/p50 and p50/floor; then each case's ranges over the rounds, and
# the causes runs' classes.
python3 - "$LOG" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split(" ", 3)
    if len(f) < 4 or f[0] != "round":
        continue
    try:
        j = json.loads(f[3])
    except ValueError:
        continue
    rows.setdefault(int(f[1]), {})[f[2]] = j
print("nop-H-G: sluiced of H, sluice-agent of G (before = 43075f0, after = tail2)")
print("round | floor p50 | case | p50 | p90 | p99 | max (us) | p99/p50 | p50/floor")
agg = {}
cases = ("nop-before-before", "nop-after-before", "nop-before-after", "nop-after-after", "causes-before", "causes-after")
for r in sorted(rows):
    fl = rows[r].get("floor", {}).get("round_trip_ns", {}).get("p50")
    for v in cases:
        s = rows[r].get(v, {}).get("round_trip_ns")
        if not s or not fl:
            continue
        q, t = s["p99"] / s["p50"], s["p50"] / fl
        agg.setdefault(v, []).append((q, t, s["p50"], s["p99"]))
        print("%d | %.2f | %s | %.2f | %.2f | %.2f | %.1f | %.2f | %.2f" % (
            r, fl / 1e3, v, s["p50"] / 1e3, s["p90"] / 1e3, s["p99"] / 1e3, s["max"] / 1e3, q, t))
for v in cases:
    a = agg.get(v)
    if not a:
        continue
    qs, ts = [x[0] for x in a], [x[1] for x in a]
    print("%s: p50 %.2f-%.2f us, p99 %.2f-%.2f us; p99/p50 %.2f-%.2f (<= 3 in %d of %d rounds); p50/floor %.2f-%.2f (<= 3 in %d of %d)" % (
        v, min(x[2] for x in a) / 1e3, max(x[2] for x in a) / 1e3, min(x[3] for x in a) / 1e3, max(x[3] for x in a) / 1e3,
        min(qs), max(qs), sum(q <= 3 for q in qs), len(qs), min(ts), max(ts), sum(t <= 3 for t in ts), len(ts)))
for r in sorted(rows):
    for v, j in rows[r].items():
        if v.startswith("yield-"):
            g = j["gosched_ns"]
            print("%s (GOMAXPROCS %d): Gosched p50 %.2f p90 %.2f p99 %.2f max %.1f us; resumed on another CPU %.1f%%" % (
                v, j["gomaxprocs"], g["p50"] / 1e3, g["p90"] / 1e3, g["p99"] / 1e3, g["max"] / 1e3, 100 * j["moved_cpu_share"]))
for r in sorted(rows):
    for v, j in sorted(rows[r].items()):
        if v.startswith("spin-"):
            print("round %d %s (sluiced of %s; gaps between looks, us p50/p99/p99.9/max): spins %d; " % (r, v, v[5:], j["spins"]) +
                  "; ".join("%s %d: %.2f/%.2f/%.2f/%.1f" % (k, j[k]["n"], j[k]["p50_ns"] / 1e3, j[k]["p99_ns"] / 1e3, j[k]["p999_ns"] / 1e3, j[k]["max_ns"] / 1e3)
                            for k in ("look", "forward", "pass")))
print("causes (after agent, --causes): class: round trips (slow: over 2x the run's p50) p50/p99 us, summed over rounds")
for v in ("causes-before", "causes-after"):
    tot = {}
    for r in sorted(rows):
        for c in rows[r].get(v, {}).get("causes", []):
            t = tot.setdefault(c["class"], [0, 0, []])
            t[0] += c["count"]; t[1] += c["slow"]
            if c["count"]:
                t[2].append("%.2f/%.2f" % (c["round_trip_ns"]["p50"] / 1e3, c["round_trip_ns"]["p99"] / 1e3))
    print("%s: " % v + "; ".join("%s %d (%d slow) %s" % (k, t[0], t[1], " ".join(t[2])) for k, t in tot.items()))
EOF
