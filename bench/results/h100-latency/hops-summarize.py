#!/usr/bin/env python3
"""summarize.py OUT: dev.sh's summary (see dev.sh)."""
import glob, json, os, sys

out = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except Exception as e:  # a failed run: say so, go on
        print(f"  (cannot read {p}: {e})")
        return None


def rates(r):
    """kernels/s of Sluice and native, p50 latency (us), bill vs truth (%)."""
    d = r["duration_ns"] / 1e9
    k = r["kernels"] / d if d else 0
    n = (r.get("native") or {}).get("kernels_per_sec") or 0
    v = r["vms"][0]
    err = v.get("accounting_error")
    return k, n, v.get("latency_p50_ns", 0) / 1e3, (100 * err if err is not None else float("nan"))


def per_kernel_us(kps):
    return 1e6 / kps if kps else float("nan")


print("GPU:", open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "?")
for b in ("new", "base"):
    c = os.path.join(here, b, "COMMIT")
    print(f"build {b}: {open(c).read().strip() if os.path.exists(c) else '?'}")

print("""
== 1. Throughput: one VM alone, THROTTLE kernels, 2 s a run; 'new' is this branch, 'base' the commit it started from.
   k/s: kernels per second; native: the same kernels by the native driver-API loop in the same run;
   added us/kernel (depth 1): 1e6/k/s(Sluice) - 1e6/k/s(native), issue 14's target <= 3 us;
   bill vs truth: what accounting charged against the kernels' own %globaltimer time.""")
print(f"{'spec':22} {'build':5} {'rnd':3} {'k/s':>9} {'native k/s':>10} {'vs nat':>7} {'added us/k':>10} {'p50 us':>7} {'bill vs truth':>13}")
means = {}
for f in sorted(glob.glob(os.path.join(out, "bench", "*.json"))):
    name = os.path.basename(f)[:-5]
    spec, rest = name.rsplit("-", 2)[0], name.rsplit("-", 2)[1:]
    r = load(f)
    if not r:
        continue
    k, n, p50, bill = rates(r)
    added = per_kernel_us(k) - per_kernel_us(n) if "depth1" in spec and n else float("nan")
    print(f"{spec:22} {rest[0]:5} {rest[1]:3} {k:9.0f} {n:10.0f} {k / n if n else 0:7.3f} {added:10.2f} {p50:7.0f} {bill:+12.1f}%")
    means.setdefault((spec, rest[0]), []).append((k, n, added, bill))
print("\nmeans over rounds:")
for (spec, b), xs in sorted(means.items()):
    m = lambda i: sum(x[i] for x in xs) / len(xs)
    print(f"  {spec:22} {b:5} k/s {m(0):9.0f}  vs native {m(0) / m(1) if m(1) else 0:.3f}  added {m(2):6.2f} us/kernel  bill {m(3):+.1f}%")


def hops(p):
    r = load(p) if os.path.exists(p) else None
    return ({h["hop"]: h for h in r["hops"]}, r) if r else ({}, None)


print("""
== 2. Where a depth-1 kernel's time goes (the hop diagnostic, SLUICE_CUDA_HOPS; p50 and p90 in us over every command).
   Sluice's period submit_to_submit is the sum of its parts below (p50s add only roughly); native's launch_to_launch
   likewise. The hops marked * need the GPU clock related to the host's (gpu_clock: its uncertainty is shown).
   The difference of the two periods is the added latency; the hop rows say which part of the path it sits in.""")
order = [
    ("submit_to_worker_read", None, "mediator Submit -> GPU worker reads the ring"),
    ("worker_read_to_launched", "enqueue_call", "worker decode + cuLaunchKernel call (native: the launch call)"),
    ("launched_to_kernel_start", "launched_to_kernel_start", "* launch call returned -> kernel's first %globaltimer"),
    ("kernel", "kernel", "the kernel itself"),
    ("kernel_end_to_end_seen", "kernel_end_to_end_seen", "* kernel's last %globaltimer -> host sees the end marker"),
    ("launched_to_end_seen_less_kernel", "launched_to_end_seen_less_kernel", "launch returned -> end seen, less the kernel (no clock needed)"),
    ("end_seen_to_callback", None, "completer sees the end -> Complete callback starts"),
    ("callback_to_next_submit", "end_seen_to_next_launch", "callback -> next Submit (bench guest + channel); native: end seen -> next launch"),
    ("callback", None, "the whole callback"),
    ("submit_to_submit", "launch_to_launch", "PERIOD: one depth-1 kernel, submit to next submit (native: launch to launch)"),
    ("submit_to_end_seen", None, "Submit -> end seen"),
    ("completer_sweep", None, "completer's sweep period"),
]
for spec in ("alone-10us-depth1", "alone-5us-depth1"):
    base = os.path.join(out, "hops", spec)
    s, sr = hops(base + ".hops.json")
    n, nr = hops(base + ".hops.json.native.json")
    m, mr = hops(base + "-memops.hops.json.native.json")
    print(f"\n-- {spec}")
    for lbl, r in (("sluice", sr), ("native", nr), ("native+memops", mr)):
        if r and r.get("gpu_clock"):
            c = r["gpu_clock"]
            print(f"   gpu_clock {lbl}: ok={c.get('ok')} uncertainty {c.get('uncertainty_ns', 0) / 1e3:.2f} us {c.get('error', '')}")
    if sr and sr.get("counters"):
        print(f"   completions delivered by the completer itself (inline): {sr['counters'].get('inlined')} of {sr['counters'].get('delivered')}")
    print(f"   {'hop (sluice)':34} {'p50':>7} {'p90':>7} | {'native p50':>10} {'p90':>7} | {'native+memops p50':>17}   what")
    f = lambda h, k: f"{h[k] / 1e3:7.2f}" if h and h.get("n") else "      -"
    for sh, nh, what in order:
        a, b, c = s.get(sh), n.get(nh) if nh else None, m.get(nh) if nh else None
        print(f"   {sh:34} {f(a, 'p50_ns')} {f(a, 'p90_ns')} | {f(b, 'p50_ns'):>10} {f(b, 'p90_ns')} | {f(c, 'p50_ns'):>17}   {what}")
    if s.get("submit_to_submit") and n.get("launch_to_launch"):
        d = (s["submit_to_submit"]["p50_ns"] - n["launch_to_launch"]["p50_ns"]) / 1e3
        print(f"   => added per kernel (p50 periods): {d:.2f} us")

print("""
== 3. The two stream memops (start/end cuStreamWriteValue64 around each kernel, as a worker does for LAUNCH; THROTTLE
   kernels write their own markers), on the native loop by themselves: native k/s without and with them, same spec.""")
for spec in ("alone-10us-depth1", "alone-5us-depth1"):
    a = load(os.path.join(out, "hops", spec + ".json")) if os.path.exists(os.path.join(out, "hops", spec + ".json")) else None
    b = load(os.path.join(out, "hops", spec + "-memops.json")) if os.path.exists(os.path.join(out, "hops", spec + "-memops.json")) else None
    if not a or not b or not a.get("native") or not b.get("native"):
        print(f"  {spec}: missing")
        continue
    ka, kb = a["native"]["kernels_per_sec"], b["native"]["kernels_per_sec"]
    print(f"  {spec}: native {ka:.0f} k/s, with memops {kb:.0f} k/s (stream_markers={b['native'].get('stream_markers')}): "
          f"the memops add {per_kernel_us(kb) - per_kernel_us(ka):.2f} us a kernel")
