#!/usr/bin/env bash
# The model layer's files do not call each other in a loop (docs/model-layer.md): from the symbols
# each object of $BUILD/src/model defines and uses (nm), every file-to-file call edge is listed and
# the strongly connected components are computed; a component of more than one file is a loop and
# fails, naming the files and one symbol per edge. The same for the #include graph of src/model.
set -u
BUILD=${BUILD:-$(dirname "${CALDRIX:-build/caldrix}")}
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
n=$(find "$BUILD/src/model" -name '*.o' 2>/dev/null | wc -l)
[ "$n" -ge 10 ] && ok "$n objects of the model layer to read" || bad "objects of the model layer in $BUILD/src/model ($n)"
out=$(python3 - "$BUILD/src/model" src/model <<'PY'
import collections, glob, os, re, subprocess, sys
objdir, srcdir = sys.argv[1], sys.argv[2]

def sccs(nodes, edges):
    idx, low, on, st, out, n = {}, {}, set(), [], [], [0]
    def visit(v):
        idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
        for w in edges[v]:
            if w not in idx: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); on.discard(w); c.append(w)
                if w == v: break
            out.append(sorted(c))
    for v in nodes:
        if v not in idx: visit(v)
    return [c for c in out if len(c) > 1]

objs = sorted(glob.glob(objdir + '/**/*.o', recursive=True))
defs, uses = {}, collections.defaultdict(set)
for o in objs:
    for line in subprocess.run(['nm', o], capture_output=True, text=True).stdout.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in 'TDRBC': defs[p[2]] = o
        elif len(p) == 2 and p[0] == 'U': uses[o].add(p[1])
edges, why = collections.defaultdict(set), {}
for o in objs:
    for s in sorted(uses[o]):
        d = defs.get(s)
        if d and d != o:
            edges[o].add(d); why.setdefault((o, d), s)
name = lambda o: os.path.relpath(o, objdir)
bad = 0
for c in sccs(objs, edges):
    bad += 1
    print('calls: a loop among ' + ', '.join(map(name, c)))
    for a in c:
        for b in c:
            if b in edges[a]: print('  %s -> %s (%s)' % (name(a), name(b), why[(a, b)]))
hdrs = sorted(glob.glob(srcdir + '/**/*.[ch]', recursive=True))
inc = collections.defaultdict(set)
for h in hdrs:
    for m in re.finditer(r'#include "([^"]+)"', open(h).read()):
        for cand in (os.path.join(os.path.dirname(h), m.group(1)), os.path.join('src', m.group(1))):
            if os.path.exists(cand): inc[h].add(os.path.normpath(cand)); break
for c in sccs(hdrs, inc):
    bad += 1
    print('includes: a loop among ' + ', '.join(c))
print('edges=%d loops=%d' % (sum(len(v) for v in edges.values()), bad))
PY
)
echo "$out"
echo "$out" | grep -q '^edges=[1-9][0-9]* ' && ok "the call graph has edges (nm read the objects)" || bad "the call graph is empty"
echo "$out" | grep -q ' loops=0$' && ok "no file of src/model is in a call or include loop" || bad "src/model has call or include loops (above)"
# Library code does not read the environment behind the caller's back (STYLE.md): the front ends
# (src/cli) read it and pass options. Known exceptions, each a documented interface of its own: the
# hub's resolution of caches, tokens and offline mode as huggingface_hub does (hub/env.c, hub/ref.c's
# ~, hub/sys.c's CALDRIX_MEM_AVAILABLE) and CALDRIX_ISA (kernel/kernels_select.c: how tests/run runs
# whole suites on each kernel set).
readers=$(for o in $(find "$BUILD/src" -name '*.o' -not -path '*/cli/*' | sort); do
    nm "$o" 2>/dev/null | grep -q ' U getenv$' && echo "${o#$BUILD/src/}"; done | tr '\n' ' ')
[ "$readers" = "hub/env.o hub/ref.o hub/sys.o kernel/kernels_select.o " ] &&
    ok "only the hub and the kernel selection read the environment ($readers)" ||
    bad "library objects that read the environment: $readers (expected hub/env.o hub/ref.o hub/sys.o kernel/kernels_select.o)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
