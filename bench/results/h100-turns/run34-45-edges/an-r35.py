import gzip, sys, collections
for fn in sys.argv[1:]:
    t0=None; st=collections.defaultdict(lambda: dict(first=None, firstfresh=None, unt=0.0, untAfter=0.0, nun=0, nout=0))
    for line in gzip.open(fn,'rt'):
        if '4294967' in line: continue
        h, _, rest = line.partition('|')
        hs=h.split(); t=int(hs[0]); dt=int(hs[1]); traced=hs[2]=='True' or hs[2]=='true'
        if t0 is None: t0=t
        for tok in rest.split():
            vid, ends, fresh, part, u0, u1, ld = tok.split(':')
            s=st[int(vid)]
            if s['first'] is None: s['first']=t-t0
            fresh = fresh=='true'
            if fresh and s['firstfresh'] is None: s['firstfresh']=t-t0
            if traced and not fresh:
                b=(float(u0) if ends[0]!='0' else 0)+(float(u1) if ends[1]!='0' else 0)
                if s['firstfresh'] is None: s['unt']+=b; s['nun']+=1
                else: s['untAfter']+=b; s['nout']+=1
    print(fn)
    for k in sorted(st, key=lambda k: st[k]['first']):
        s=st[k]; print(f"  vm{k}: first {s['first']}us firstfresh {s['firstfresh']}us untraced-before {s['unt']/1e3:.0f}us ({s['nun']}) after {s['untAfter']/1e3:.0f}us ({s['nout']})")
