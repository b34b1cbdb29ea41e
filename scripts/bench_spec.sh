#!/usr/bin/env bash
# bench_spec.sh — speculative decoding against speculation off, in the same run, with
# `kvserve bench` (greedy, ignore_eos) on a synthetic pair built by `kvserve mkmodel`:
#   target: dim 768, 12 heads, 24 layers, Q8_0, layers 4.. quiet (--quiet-from 4);
#   draft:  the same seed with 4 layers (the target's first four, embedding and head).
# Points (each the median of RUNS interleaved off/on pairs, so load on a shared machine hits both):
#   1. one stream, 64-token prompt, OUT output tokens: off vs --speculative draft, for each quiet
#      scale of QUIETS (the pair's agreement: its acceptance is the row's last column);
#   2. the same stream: off vs --speculative ngram (the synthetic target's greedy output falls into
#      cycles, which prompt lookup catches: a repeating workload, not a real edit);
#   3. 4 streams (the most that speculate by default; the draft drafts them as one batch) and
#      16 streams: off vs draft and vs ngram (speculation turns itself off above
#      --spec-disable-batch decoding sequences).
# Prints a Markdown table. Usage: scripts/bench_spec.sh [BIN]; THREADS (2), RUNS (3), K (4),
# QUIET (0.05, the quiet layers' scale of the other points: lower makes the pair agree more),
# QUIETS (the scales of point 1: "0.05 0.02 0.01"), OUT (256 output tokens).
set -euo pipefail
BIN=${1:-build/kvserve}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
K=${K:-4}
QUIET=${QUIET:-0.05}
QUIETS=${QUIETS:-0.05 0.02 0.01}
OUT=${OUT:-256}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
# shellcheck source=benchlib.sh
. "$(dirname "$0")/benchlib.sh"
mkdir -p "$DIR"
target() { # quiet scale -> the target's file (made once)
    local t=$DIR/spec-target-768x24-q$1.gguf
    [ -f "$t" ] || "$BIN" mkmodel -o "$t" --dim 768 --heads 12 --layers 24 --quiet-from 4 --quiet-scale "$1" \
        --type q8_0 --seed 11 >/dev/null
    echo "$t"
}
TGT=$(target "$QUIET")
DRF=$DIR/spec-draft-768x4.gguf
[ -f "$DRF" ] || "$BIN" mkmodel -o "$DRF" --dim 768 --heads 12 --layers 4 --type q8_0 --seed 11 >/dev/null

run() { # flags... -> the JSON line
    "$BIN" bench -m "$TGT" --threads "$THREADS" --seed 1 --json "$@" 2>/dev/null | tail -n 1
}

point() { # label, streams, spec flags... -> one table row
    local label=$1 streams=$2
    shift 2
    local off=() on=() acc=()
    for _ in $(seq 1 "$RUNS"); do
        local w=(--requests "$streams" --max-seqs "$streams" --input-len 64:64 --output-len "$OUT:$OUT")
        local a b
        a=$(run "${w[@]}")
        b=$(run "${w[@]}" --num-speculative-tokens "$K" "$@")
        off+=("$(field "$a" output_tokens_per_s)")
        on+=("$(field "$b" output_tokens_per_s)")
        acc+=("$(field "$b" spec_acceptance)")
    done
    local mo mn
    mo=$(median "${off[@]}")
    mn=$(median "${on[@]}")
    printf '| %s | %.1f | %.1f | %.2f× | %.2f |\n' "$label" "$mo" "$mn" "$(awk "BEGIN {print $mn / $mo}")" \
        "$(median "${acc[@]}")"
}

echo "| workload (768×24 Q8_0 target, $THREADS threads, k $K) | off tok/s | on tok/s | speed-up | acceptance |"
echo "|---|---:|---:|---:|---:|"
for q in $QUIETS; do
    TGT=$(target "$q")
    point "1 stream, draft (4 layers), quiet $q" 1 --speculative draft --draft-model "$DRF"
done
TGT=$(target "$QUIET")
point "1 stream, ngram" 1 --speculative ngram
point "4 streams, draft" 4 --speculative draft --draft-model "$DRF"
point "4 streams, ngram" 4 --speculative ngram
point "16 streams, draft" 16 --speculative draft --draft-model "$DRF"
point "16 streams, ngram" 16 --speculative ngram
