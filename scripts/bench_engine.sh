#!/usr/bin/env bash
# bench_engine.sh — offline engine throughput with `kvserve bench` (no HTTP), the figures of the
# continuous-batching and prefix-cache issues, on a synthetic TinyLlama-110M-shaped Q8_0 model:
#   1. 32 requests, 128-token prompts, 64 output tokens at --max-seqs 1, 4 and 16;
#   2. decode-dominated: 32 requests, 16-token prompts, 256 output tokens at --max-seqs 1 and 16;
#   3. shared prefix: 16 requests of 1,064 tokens sharing a 1,000-token prefix, --max-seqs 4,
#      16 output tokens, with the prefix cache and with --no-prefix-cache;
#   4. cache on at a 0% hit rate (no shared prefix) vs --no-prefix-cache, same workload as 1 at 16.
# Each point is the median of RUNS runs (default 3). Prints a Markdown table.
set -euo pipefail
BIN=${1:-build/kvserve}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
# shellcheck source=benchlib.sh
. "$(dirname "$0")/benchlib.sh"
MODEL=$(bench_110m_model "$DIR" "$BIN")

point() { # label, bench flags... -> one table row (medians of RUNS runs)
    local label=$1
    shift
    local tps=() ttft=() tpot=() hit=() pre=()
    for _ in $(seq 1 "$RUNS"); do
        local j
        j=$("$BIN" bench -m "$MODEL" --threads "$THREADS" --seed 1 --json "$@" 2>/dev/null | tail -n 1)
        tps+=("$(field "$j" output_tokens_per_s)")
        ttft+=("$(field "$j" ttft_ms_mean)")
        tpot+=("$(field "$j" tpot_ms_mean)")
        hit+=("$(field "$j" prefix_cache_hit_rate)")
        pre+=("$(field "$j" preemptions)")
    done
    printf '| %s | %.1f | %.0f | %.1f | %.3f | %s |\n' "$label" "$(median "${tps[@]}")" \
        "$(median "${ttft[@]}")" "$(median "${tpot[@]}")" "$(median "${hit[@]}")" "$(median "${pre[@]}")"
}

echo "| workload (TinyLlama-110M-shaped Q8_0, $THREADS threads) | output tok/s | mean TTFT ms | mean TPOT ms | prefix hit rate | preemptions |"
echo "|---|---:|---:|---:|---:|---:|"
for s in 1 4 16; do
    point "32 req, 128 in / 64 out, max-seqs $s" --requests 32 --input-len 128:128 --output-len 64:64 --max-seqs "$s"
done
for s in 1 16; do
    point "32 req, 16 in / 256 out, max-seqs $s" --requests 32 --input-len 16:16 --output-len 256:256 --max-seqs "$s"
done
point "16 req, 1000 shared + 64 in / 16 out, max-seqs 4, cache on" --requests 16 --input-len 1064:1064 \
    --output-len 16:16 --shared-prefix 1000 --max-seqs 4
point "16 req, 1000 shared + 64 in / 16 out, max-seqs 4, --no-prefix-cache" --requests 16 --input-len 1064:1064 \
    --output-len 16:16 --shared-prefix 1000 --max-seqs 4 --no-prefix-cache
point "32 req, 128 in / 64 out, max-seqs 16, --no-prefix-cache" --requests 32 --input-len 128:128 \
    --output-len 64:64 --max-seqs 16 --no-prefix-cache
point "8 conversations × 4 turns, 128 in / 32 out per turn, max-seqs 8" --requests 8 --turns 4 \
    --input-len 128:128 --output-len 32:32 --max-seqs 8
