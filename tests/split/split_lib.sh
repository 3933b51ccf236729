# Shared by tests/split/test_*.sh (sourced): mpirun on this machine, and the whole-vs-split check.
# Sets MPIRUN (mpirun with the flags a loopback test bed needs) and HAVE_SPLIT (1 when mpirun exists
# and $CALDRIX was built with Open MPI; else WHY_NO_SPLIT says why).
CALDRIX=${CALDRIX:-build/caldrix}
pass=0; fail=0; skip=0
ok() { pass=$((pass+1)); echo "ok - $1"; }
bad() { fail=$((fail+1)); echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; echo "  out: $(head -c 400 "$tmp/out")"; echo "  err: $(head -c 600 "$tmp/err")"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp"
# Under the sanitizer build (CALDRIX=build-san/caldrix) the ranks run without LeakSanitizer: Open
# MPI 4.1 and its components leave their own allocations at MPI_Finalize, in frames it cannot name.
# The single-process runs keep it; ASan and UBSan stay on in every rank.
MPIRUN="env ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS} $MPIRUN"
HAVE_SPLIT=0; WHY_NO_SPLIT=""
if ! command -v mpirun >/dev/null 2>&1; then
    WHY_NO_SPLIT="mpirun is not installed (scripts/deps installs openmpi-bin)"
else
    timeout 60 $MPIRUN -np 2 "$CALDRIX" run models/stories260K.gguf --allow-split -p hi -n 1 >"$tmp/probe" 2>&1
    if grep -q "has no Open MPI" "$tmp/probe"; then
        WHY_NO_SPLIT="$CALDRIX was built without Open MPI (pkg-config ompi-c was not found)"
    else
        HAVE_SPLIT=1
    fi
fi

# rank_pid PID R: the pid of rank R of the mpirun under PID (a child of mpirun whose OMPI_COMM_WORLD_RANK is R)
rank_pid() {
    local p c
    for p in $1 $(pgrep -P "$1") $(for c in $(pgrep -P "$1"); do pgrep -P "$c"; done); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = mpirun ] || continue
        for c in $(pgrep -P "$p"); do
            tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$c"; return; }
        done
    done
}

# same_bits WHOLE.json SPLIT.json: the tokens and every step's top logits as float bits
same_bits() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
bits = lambda o: [(t['token'], [(i, struct.pack('<f', v)) for i, v in t['top']]) for t in o['steps']]
sys.exit(not (a['tokens'] == b['tokens'] and len(a['tokens']) > 0 and bits(a) == bits(b)))
PY
}

# The prompt ids of a fixture's longest golden case without image tokens (longer than any sliding
# window of the fixtures; a vision model's text-only case).
prompt_of() {
    python3 - "$1/golden.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
img = g.get('image_token_id')
c = max((c for c in g['cases'] if img is None or img not in c['prompt_ids']), key=lambda c: len(c['prompt_ids']))
print(','.join(map(str, c['prompt_ids'])))
PY
}
