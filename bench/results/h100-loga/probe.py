# Feasibility probe: can a host process read the H100's runlist engine status (current TSG of the GR engine)
# through BAR0 (sysfs resource0), read-only? Prints what it finds. Never writes a register.
import glob, mmap, os, subprocess, sys, time
import numpy as np

def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e: return str(e)
print("id:", sh("id")); print("uname:", sh("uname -r")); print("cmdline:", sh("cat /proc/cmdline"))
print("lockdown:", sh("cat /sys/kernel/security/lockdown 2>&1"))
print("strict devmem:", sh("grep -h STRICT_DEVMEM /boot/config-$(uname -r) 2>&1"))
dev = None
for d in sorted(glob.glob('/sys/bus/pci/devices/*')):
    if open(d+'/vendor').read().strip() == '0x10de' and open(d+'/class').read().startswith('0x03'):
        dev = d
print("dev:", dev, open(dev+'/resource').read().splitlines()[0])
size = os.path.getsize(dev+'/resource0'); print("resource0 size", hex(size))
try:
    fd = os.open(dev+'/resource0', os.O_RDONLY)
    mm = mmap.mmap(fd, 16 << 20, mmap.MAP_SHARED, mmap.PROT_READ)
except Exception as e:
    print("MMAP FAILED:", repr(e)); sys.exit(0)
a = np.frombuffer(mm, dtype=np.uint32)
def rd(off): return int(a[off >> 2])
print("PMC_BOOT_0 = %#010x" % rd(0))
rows = [rd(0x22800 + 4*i) for i in range(353)]
devs, cur = [], []
for r in rows:
    if r == 0 and not cur: continue
    cur.append(r)
    if not (r >> 31): devs.append(cur); cur = []
eng = []
for d in devs:
    if len(d) < 3: print("short entry", [hex(x) for x in d]); continue
    typ = (d[0] >> 24) & 0x7f; inst = (d[0] >> 16) & 0xff; is_eng = (d[1] >> 30) & 1
    pri = ((d[1] >> 8) & 0x3ffff) << 8; rleng = d[2] & 3; rlbase = ((d[2] >> 10) & 0xffff) << 10
    print("dev type %#x inst %d engine %d pri %#x rleng %d rlbase %#x" % (typ, inst, is_eng, pri, rleng, rlbase))
    if is_eng: eng.append((typ, inst, rleng, rlbase))
gr = [e for e in eng if e[0] == 0]
print("GR:", gr)
if not gr: sys.exit(0)
_, _, rleng, rlbase = gr[0]
cands = {"s200": rlbase + 0x200 + 64*rleng, "s090": rlbase + 0x90 + 64*rleng}
def dec(v): return "tsg %d ctx %d next %d sw %d eng %d raw %#010x" % (v & 0xfff, (v >> 13) & 7, (v >> 16) & 0xfff, (v >> 15) & 1, v >> 31, v)
for k, off in cands.items(): print("idle", k, hex(off), dec(rd(off)))
t0 = time.perf_counter_ns(); n = 20000
for _ in range(n): rd(cands["s200"])
print("read cost ns (python incl):", (time.perf_counter_ns() - t0) / n)

KERN = r'''
import cupy as cp, sys, time
k = cp.RawKernel(r"""extern "C" __global__ void spin(long long ns){ long long t0; asm volatile("mov.u64 %0, %%globaltimer;":"=l"(t0)); long long t=t0; while(t-t0<ns){ asm volatile("mov.u64 %0, %%globaltimer;":"=l"(t)); } }""","spin")
ns = int(sys.argv[1]); end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(20): k((1,), (1,), (cp.int64(ns),))
    cp.cuda.runtime.deviceSynchronize()
print("worker done", flush=True)
'''
open('/tmp/kern.py', 'w').write(KERN)
def sample(label, secs):
    seen = {}; trans = 0; last = None; t_end = time.time() + secs; n = 0
    while time.time() < t_end:
        for k, off in cands.items():
            v = rd(off); key = (k, v & 0xfff, (v >> 13) & 7, v >> 31)
            seen[key] = seen.get(key, 0) + 1
            if k == "s200":
                if last is not None and (v & 0xfff) != (last & 0xfff): trans += 1
                last = v
        n += 1
    print(label, "samples", n, "tsg transitions(s200)", trans)
    for key, c in sorted(seen.items(), key=lambda x: -x[1])[:14]: print("  ", key, c)
sample("idle", 0.5)
p1 = subprocess.Popen([sys.executable, '/tmp/kern.py', '1000000', '6']); time.sleep(3)
sample("one proc (1ms kernels)", 1.5)
p2 = subprocess.Popen([sys.executable, '/tmp/kern.py', '1000000', '4']); time.sleep(2)
sample("two procs (1ms kernels)", 1.5)
p1.wait(); p2.wait()
sample("after", 0.3)
print("dmesg tail:", sh("dmesg 2>&1 | tail -5"))
