#!/usr/bin/env python3
"""Summarize sluicectl bench JSONs of two builds side by side.

usage: summarize.py BASE_DIR BRANCH_DIR > table.md
One row per spec found in both: arbitration (in force, switches), Jain,
utilization, and per VM share and bill error (accounted vs the sim's truth).
"""
import json
import os
import sys


def load(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith('.json'):
            out[f[:-5]] = json.load(open(os.path.join(d, f)))
    return out


def arb(r):
    a = r.get('arbitration') or 'driver'
    if a == 'auto':
        a += '→%s (%d sw)' % (r.get('arbitration_in_force'), r.get('arbitration_switches') or 0)
    return a


def vms(r):
    parts = []
    for v in r['vms']:
        e = v.get('accounting_error')
        parts.append('%s %.3f%s' % (v['name'], v['share'], '' if e is None else ' (%+.1f%%)' % (100 * e)))
    return ', '.join(parts)


def main():
    base, branch = load(sys.argv[1]), load(sys.argv[2])
    print('| spec | arbitration base → branch | Jain base → branch | utilization base → branch | shares (bill error) base | shares (bill error) branch |')
    print('| --- | --- | --- | --- | --- | --- |')
    for name in sorted(set(base) & set(branch)):
        a, b = base[name], branch[name]
        print('| %s | %s → %s | %.4f → %.4f | %.4f → %.4f | %s | %s |' % (
            name, arb(a), arb(b), a['jain_index'], b['jain_index'], a['utilization'], b['utilization'], vms(a), vms(b)))


main()
