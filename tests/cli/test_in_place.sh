#!/usr/bin/env bash
# Matrices read in place at first: Q8_0, Q4_0, IQ4_NL, Q4_K and Q6_K (the AVX2, AVX-512 and AMX sets),
# Q5_K and IQ4_XS (the AVX-512 and AMX sets)
# before their packed layout is made, F16 (and BF16, F32) before their copy onto 2 MiB pages is (when the file's pages are not
# mapped that way; this small file's are not). A background thread packs or copies them, and each
# forward pass installs what is ready. The output must not depend on
# any of it: packed at load (CALDRIX_MMAP=0), in place for good (CALDRIX_MMAP=1) and the default
# (in place, then packed whenever the packer gets there) give the same tokens and the same top
# logits, compared as the 17-digit numbers run --json prints (the float bits). The expected
# values are caldrix's own packed run; what this checks is that nothing else changes them
# (test_kernels holds the kernels to the scalar dot).
# isa-neutral: it runs the avx2, avx512 and amx sets itself (run --isa), whatever CALDRIX_ISA says
set -u
cd "$(dirname "$0")/../.."
CALDRIX=${CALDRIX:-build/caldrix}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); echo "  ok: $1"; }
bad() { fail=$((fail+1)); echo "  FAIL: $1"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

if ! grep -qw avx2 /proc/cpuinfo; then
    echo "  skip: this CPU lacks AVX2, whose kernel set is the one that reads matrices in place"
    echo "0 passed, 0 failed"
    exit 0
fi

long=$(python3 -c 'print(",".join(str(1 + (i * 37) % 500) for i in range(40)))')
# with_mode MODE CMD...: CMD with CALDRIX_MMAP=MODE, or without it when MODE is ""
with_mode() {
    local mode=$1; shift
    if [ -n "$mode" ]; then CALDRIX_MMAP=$mode "$@"; else env -u CALDRIX_MMAP "$@"; fi
}
# run MODE NAME ARGS...: caldrix run on $tmp/m.gguf, its JSON in $tmp/NAME.json
run() {
    local mode=$1 name=$2; shift 2
    with_mode "$mode" "$CALDRIX" run "$tmp/m.gguf" --isa "$isa" -t 2 --json --top-logits 5 --ignore-eos "$@" \
        >"$tmp/$name.json" 2>"$tmp/$name.err"
}
same() { # A B: the same tokens and the same top logits, number for number
    python3 - "$tmp/$1.json" "$tmp/$2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["tokens"] and a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
assert a["steps"] == b["steps"], "top logits differ"
PY
}
isas=avx2
if CALDRIX_ISA=avx512 "$CALDRIX" version >/dev/null 2>&1; then
    isas="avx2 avx512"
else
    echo "  skip: the avx512 set (this CPU lacks AVX-512); the avx2 set only"
fi
# amx: the avx512 set with tiles for batches of 16 tokens and more; its outputs must be avx512's
if CALDRIX_ISA=amx "$CALDRIX" version >/dev/null 2>&1; then
    isas="$isas amx"
else
    echo "  skip: the amx set (this CPU lacks AMX, or the OS does not grant it)"
fi
# Q4_K_M: Q4_K matrices and Q6_K ones (attn_v, ffn_down, the head); Q5_K_M: Q5_K and Q6_K ones
for type in Q8_0 Q4_0 IQ4_NL Q4_K_M Q6_K F16 Q5_K_M IQ4_XS; do
    rm -f "$tmp/m.gguf"
    "$CALDRIX" synth "$tmp/m.gguf" --shape tiny --type $type --seed 11 -t 2 2>/dev/null
    check "synth writes a tiny $type model" '[ -s "$tmp/m.gguf" ]'
    for isa in $isas; do
        for mode in 0 1 ""; do
            tag=${mode:-bg}
            run "$mode" "greedy-$tag" --prompt-ids 1,5,9,200,31 -n 24 --temp 0
            run "$mode" "long-$tag" --prompt-ids "$long" -n 16 --temp 0
            run "$mode" "sampled-$tag" --prompt-ids "$long" -n 16 --temp 0.9 --seed 3
        done
        for case in greedy long sampled; do
            check "$isa $type $case: read in place for good = packed at load (tokens and top-5 logits)" "same $case-0 $case-1"
            check "$isa $type $case: in place, then packed in the background = packed at load" "same $case-0 $case-bg"
            cp "$tmp/$case-0.json" "$tmp/$isa-$case.json"
        done
        if [ "$isa" = amx ]; then # a 40-token prompt: two tiles of 16 by tdpbsud, 8 tokens by the AVX-512 kernels
            for case in long sampled; do
                check "amx $type $case: the avx512 set's tokens and top-5 logits" "same avx512-$case amx-$case"
            done
        fi
    done
done

# bench: ready at load_ms; pack_ms is the wait for the background layouts (none when told to
# read in place, or to pack at load)
for mode in 0 1 ""; do
    with_mode "$mode" "$CALDRIX" bench "$tmp/m.gguf" --isa avx2 -t 2 -p 8 -n 4 -r 1 --json >"$tmp/b-${mode:-bg}.json" 2>/dev/null
done
check "bench --json: pack_ms is a number >= 0 by default" \
    'python3 -c "import json,sys; o=json.load(open(sys.argv[1])); v=o[\"pack_ms\"]; assert isinstance(v,(int,float)) and v>=0, o" "$tmp/b-bg.json"'
check "bench --json: pack_ms is 0 when CALDRIX_MMAP=1 (in place) or =0 (packed at load)" \
    'python3 -c "import json,sys; assert all(json.load(open(p))[\"pack_ms\"]==0 for p in sys.argv[1:])" "$tmp/b-0.json" "$tmp/b-1.json"'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
