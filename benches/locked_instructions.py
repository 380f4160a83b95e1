#!/usr/bin/env python3
"""Lists the lock-prefixed (and xchg/mfence) instructions a callgrind run executed at
least MIN times, per object file, with the function they belong to.

Usage: locked_instructions.py CALLGRIND_OUT MIN   (the output of --dump-instr=yes)
Driven by benches/lock_audit.sh.
"""
import sys, re, subprocess, collections
path, minc = sys.argv[1], int(sys.argv[2])
obs = {}; ob = None; addr = 0; skip = False
cost = collections.Counter()
fnname = {}; cur_fn = None
fns = {}
def pos(tok, prev):
    if tok.startswith('0x'): return int(tok, 16)
    if tok.startswith('+'): return prev + int(tok[1:], 16) if tok[1:].startswith('0x') else prev + int(tok[1:])
    if tok.startswith('-'): return prev - int(tok[1:])
    if tok == '*': return prev
    return int(tok)
for line in open(path):
    line = line.rstrip('\n')
    if not line: continue
    m = re.match(r'^(ob|fn|cob|cfn|fl|fi|fe|cfi|cfl)=\((\d+)\)(?: (.*))?$', line)
    if m:
        k, i, name = m.groups()
        if k in ('ob', 'cob'):
            if name: obs[i] = name
            if k == 'ob': ob = obs[i]
        if k in ('fn','cfn'):
            if name: fns[i] = name
            if k == 'fn': cur_fn = fns[i]
        continue
    if line.startswith('calls='):
        skip = True; continue
    if line[0] in '0123456789+-*':
        toks = line.split()
        addr = pos(toks[0], addr)
        if skip:
            skip = False; continue
        if len(toks) >= 3:
            cost[(ob, addr)] += int(toks[2])
            fnname[(ob, addr)] = cur_fn
hot = [(k, v) for k, v in cost.items() if v >= minc]
byob = collections.defaultdict(list)
for (o, a), v in hot: byob[o].append((a, v))
for o, lst in byob.items():
    dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', o], capture_output=True, text=True).stdout
    ins = {}
    for l in dis.splitlines():
        mm = re.match(r'^\s+([0-9a-f]+):\s+(.*)$', l)
        if mm: ins[int(mm.group(1), 16)] = mm.group(2)
    nlock = 0
    for a, v in sorted(lst):
        t = ins.get(a, '?')
        if re.search(r'\block\b|xchg|mfence', t) and not re.search(r'xchg\s+%ax,%ax', t):
            nlock += 1
            print(f'LOCK {o} 0x{a:x} count={v} {t} in {fnname[(o,a)]}')
    print(f'# {o}: {len(lst)} hot instructions, {nlock} locked')
