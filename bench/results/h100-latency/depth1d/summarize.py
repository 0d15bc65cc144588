#!/usr/bin/env python3
"""summarize.py DIR: dev.sh's summary of DIR (the folder dev.sh tars)."""
import glob, json, os, statistics, sys

d = sys.argv[1]
BUILDS = ["base", "code", "yield", "new"]
SPECS = ["alone-10us-depth1", "alone-5us-depth1", "alone-5us-depth32", "alone-10us-depth32"]


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:
        print(f"  (cannot read {p}: {e})")
        return None


def med(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def rates(r):
    dur = r["duration_ns"] / 1e9
    k = r["kernels"] / dur if dur else 0
    n = (r.get("native") or {}).get("kernels_per_sec") or 0
    e = r["vms"][0].get("accounting_error")
    return k, n, (100 * e if e is not None else float("nan"))


def us(kps):
    return 1e6 / kps if kps else float("nan")


for f in ("host.txt", "BUILDS"):
    p = os.path.join(d, f)
    if os.path.exists(p):
        print(open(p).read().strip())
for f in ("skipped.txt",):
    p = os.path.join(d, f)
    if os.path.exists(p):
        print("SKIPPED RUNS:\n" + open(p).read().strip())

print("""
== 1. Four builds interleaved, 3 rounds (one Sluice run of 2 s and one native run each; builds rotate within a round).
   k/s: Sluice's kernels per second, per round and median. native: every run's native loop (the same code in every
   build) pooled per spec: its median and spread. vs nat: median k/s over the pooled native median. added (depth 1):
   1e6/median k/s - 1e6/pooled native median, us a kernel (issue 14: <= 3); paired: the median of each run's
   1e6/k/s - 1e6/its own native. bill: accounting vs the kernels' own time, median.""")
for s in SPECS:
    runs = {}
    natives = []
    for b in BUILDS:
        for f in sorted(glob.glob(os.path.join(d, "bench", f"{s}-{b}-r*.json"))):
            r = load(f)
            if not r:
                continue
            k, n, bill = rates(r)
            runs.setdefault(b, []).append((f.rsplit("-r", 1)[1][:-5], k, n, bill))
            if n:
                natives.append(n)
    nm = med(natives)
    spread = f"{min(natives):.0f}-{max(natives):.0f}" if natives else "-"
    print(f"\n-- {s}: native pooled median {nm:.0f} k/s ({spread}, {len(natives)} runs)")
    print(f"   {'build':6} {'k/s per round':>26} {'median':>8} {'vs nat':>7} {'added':>7} {'paired':>7} {'bill':>6}")
    for b in BUILDS:
        xs = runs.get(b, [])
        if not xs:
            print(f"   {b:6} (no runs)")
            continue
        km = med([x[1] for x in xs])
        per = " ".join(f"{x[1]:8.0f}" for x in sorted(xs))
        added = us(km) - us(nm) if "depth1" in s else float("nan")
        paired = med([us(x[1]) - us(x[2]) for x in xs if x[2]]) if "depth1" in s else float("nan")
        print(f"   {b:6} {per:>26} {km:8.0f} {km / nm if nm else 0:7.3f} {added:7.2f} {paired:7.2f} {med([x[3] for x in xs]):+5.1f}%")

print("""
== 2. Hops of a depth-1 kernel (SLUICE_CUDA_HOPS; p50 in us over every command of one 2 s run), base against new.
   The native columns are the native loop's of the same run (launch call; end seen -> next launch; launch to launch).""")
order = [
    ("submit_to_worker_read", None),
    ("worker_read_to_launched", "enqueue_call"),
    ("launched_to_end_seen_less_kernel", "launched_to_end_seen_less_kernel"),
    ("kernel_end_to_end_seen", "kernel_end_to_end_seen"),
    ("end_seen_to_callback", None),
    ("callback_to_next_submit", "end_seen_to_next_launch"),
    ("callback", None),
    ("completer_sweep", None),
    ("submit_to_submit", "launch_to_launch"),
]


def hops(p):
    r = load(p) if os.path.exists(p) else None
    return ({h["hop"]: h for h in r["hops"]}, r) if r else ({}, None)


for s in ("alone-10us-depth1", "alone-5us-depth1"):
    print(f"\n-- {s}")
    cols = {}
    for b in ("base", "new"):
        base = os.path.join(d, "hops", f"{s}-{b}.hops.json")
        cols[b] = (hops(base), hops(base + ".native.json"))
    for b in ("base", "new"):
        (sh, sr), _ = cols[b]
        if sr and sr.get("counters"):
            print(f"   {b}: inline {sr['counters'].get('inlined')} of {sr['counters'].get('delivered')} completions")
    print(f"   {'hop':34} {'base':>7} {'new':>7} {'new-base':>8} | {'native(base run)':>16} {'native(new run)':>15}")
    p50 = lambda h: h["p50_ns"] / 1e3 if h and h.get("n") else float("nan")
    for sh, nh in order:
        a = p50(cols["base"][0][0].get(sh))
        b = p50(cols["new"][0][0].get(sh))
        na = p50(cols["base"][1][0].get(nh)) if nh else float("nan")
        nb = p50(cols["new"][1][0].get(nh)) if nh else float("nan")
        print(f"   {sh:34} {a:7.2f} {b:7.2f} {b - a:+8.2f} | {na:16.2f} {nb:15.2f}")
    for b in ("base", "new"):
        (sh, _), (nh, _) = cols[b]
        if sh.get("submit_to_submit") and nh.get("launch_to_launch"):
            print(f"   => {b}: added per kernel (p50 periods) {(sh['submit_to_submit']['p50_ns'] - nh['launch_to_launch']['p50_ns']) / 1e3:.2f} us")

print("""
== 3. new's own interleaved comparison (sluicectl bench run --rounds 3: Sluice and native alternating; medians and
   the spread over the rounds, from the JSON's "interleaved").""")
for s in SPECS:
    r = load(os.path.join(d, "interleaved", s + ".json")) if os.path.exists(os.path.join(d, "interleaved", s + ".json")) else None
    i = (r or {}).get("interleaved")
    if not i:
        print(f"  {s}: missing")
        continue
    sp = lambda x, f=1: f"{x['median'] * f:.3f} ({x['min'] * f:.3f}-{x['max'] * f:.3f})"
    print(f"  {s:20} k/s {i['kernels_per_sec']['median']:.0f} ({i['kernels_per_sec']['min']:.0f}-{i['kernels_per_sec']['max']:.0f}), "
          f"native {i['native_kernels_per_sec']['median']:.0f} ({i['native_kernels_per_sec']['min']:.0f}-{i['native_kernels_per_sec']['max']:.0f}), "
          f"vs native {sp(i['vs_native'])}, added us/kernel {sp(i['added_ns_per_kernel'], 1e-3)}")

p = os.path.join(d, "hops", "alone-10us-depth1-new.cpu.pprof")
print(f"\n== 4. CPU profile of new on alone-10us-depth1: hops/alone-10us-depth1-new.cpu.pprof "
      f"({os.path.getsize(p) if os.path.exists(p) else 'missing'} bytes); read it where Go is:\n"
      "   go tool pprof -top -nodecount 40 hops/alone-10us-depth1-new.cpu.pprof")
