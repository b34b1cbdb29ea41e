#!/usr/bin/env bash
# bench_quantised.sh — kvserve against llama.cpp on TinyLlama-1.1B-shaped quantised models, side by
# side in the same run: decode and 512-token prefill, interleaved, median of $ROUNDS (default 5).
#
#   scripts/bench_quantised.sh [KVSERVE_BIN]
#
# Needs llama.cpp's `run` wrapper ($LLAMA_RUN, default ../shared/anchors/llama.cpp/run): its
# llama-quantize makes the models and its llama-bench is the reference. The F16 model comes from
# `kvserve mkmodel` (random weights, the 1.1B shape), then llama-quantize writes each of $TYPES
# (default "Q4_K_M Q4_0") into $KVSERVE_BENCH_DIR (default: a kvserve-bench folder under $TMPDIR or
# /tmp), reused between runs. Each round, for each type, runs one after the other:
#   kvserve generate -n 128 --ignore-eos from the empty prompt    (decode tok/s, batch 1)
#   llama-bench -p 0 -n 128 -r 1                                 (decode tok/s)
#   kvserve generate -n 1 on a prompt of exactly 512 tokens        (prefill tok/s, one step)
#   llama-bench -p 512 -n 0 -r 1                                 (prefill tok/s)
# all with $THREADS threads (default 2). KVSERVE_CPU_ISA passes through to kvserve (e.g. avx2, next
# to an AVX2-only llama.cpp build in LLAMA_RUN). Also prints the peak RSS of a short generate next
# to the file size, and decode as a fraction of the bandwidth bound (bench/bench_generate).
set -euo pipefail

BIN=${1:-build/kvserve}
BENCH=${BENCH:-$(dirname "$BIN")/bench/bench_generate}
LLAMA_RUN=${LLAMA_RUN:-../shared/anchors/llama.cpp/run}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}
TYPES=${TYPES:-"Q4_K_M Q4_0"}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
mkdir -p "$DIR"
[ -x "$LLAMA_RUN" ] || { echo "bench_quantised: no llama.cpp at $LLAMA_RUN (set LLAMA_RUN)" >&2; exit 2; }

f16="$DIR/1.1b-f16.gguf"
for t in $TYPES; do
    q="$DIR/1.1b-$t.gguf"
    [ -s "$q" ] && continue
    if [ ! -s "$f16" ]; then
        echo "writing $f16" >&2
        "$BIN" mkmodel -o "$f16" --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 \
            --context 2048 --type f16 >&2
    fi
    echo "quantising $q" >&2
    "$LLAMA_RUN" llama-quantize "$f16" "$q" "$t" "$THREADS" >/dev/null 2>&1 ||
        { echo "bench_quantised: llama-quantize $t failed" >&2; exit 1; }
done

first=$(echo "$TYPES" | awk '{print $1}')
# 511 repetitions of a one-token word after the BOS: checked with the model's own tokenizer.
prompt=$(printf 'time%.0s ' $(seq 511))
prompt=${prompt% }
n=$("$BIN" tokenize -m "$DIR/1.1b-$first.gguf" "$prompt" | wc -w)
[ "$n" = 512 ] || echo "bench_quantised: the prompt is $n tokens, not 512" >&2

err=$(mktemp)
trap 'rm -f "$err"' EXIT
field() { tail -n 1 "$err" | sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p"; }
llama() { # args... -> avg_ts of llama-bench's one test
    "$LLAMA_RUN" llama-bench -t "$THREADS" -r 1 -o json "$@" 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

declare -A kd ld kp lp
for ((r = 1; r <= ROUNDS; r++)); do
    for t in $TYPES; do
        m="$DIR/1.1b-$t.gguf"
        "$BIN" generate -m "$m" -n 128 --ignore-eos --temperature 0 --threads "$THREADS" --device cpu >/dev/null 2>"$err"
        kd[$t]+=" $(field decode_tokens_per_s)"
        ld[$t]+=" $(llama -m "$m" -p 0 -n 128)"
        "$BIN" generate -m "$m" -p "$prompt" -n 1 --temperature 0 --threads "$THREADS" --device cpu >/dev/null 2>"$err"
        kp[$t]+=" $(field prefill_tokens_per_s)"
        lp[$t]+=" $(llama -m "$m" -p 512 -n 0)"
        echo "round $r $t: decode${kd[$t]##* } vs${ld[$t]##* }, prefill${kp[$t]##* } vs${lp[$t]##* } (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
done

bw=""
# shellcheck disable=SC2046
[ -x "$BENCH" ] && bw=$("$BENCH" -t "$THREADS" $(for t in $TYPES; do echo "$DIR/1.1b-$t.gguf"; done))
echo
echo "| model | kvserve decode tok/s | llama.cpp decode | ratio | kvserve prefill tok/s (512) | llama.cpp prefill | ratio | decode / bandwidth bound | peak RSS / file |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for t in $TYPES; do
    m="$DIR/1.1b-$t.gguf"
    # shellcheck disable=SC2086
    a=$(median ${kd[$t]}) b=$(median ${ld[$t]}) c=$(median ${kp[$t]}) d=$(median ${lp[$t]})
    rss=$(/usr/bin/time -f '%M' "$BIN" generate -m "$m" -p hello -n 8 --temperature 0 --threads "$THREADS" \
        --device cpu 2>&1 >/dev/null | tail -n 1)
    size=$(stat -c %s "$m")
    bound=$(echo "$bw" | grep -F "$m:" | sed -n 's/.*bound [0-9.]* tok\/s (memcpy), \([0-9.]*\) tok\/s (read).*/\1/p')
    awk -v t="1.1b-$t" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v bd="${bound:-0}" -v rss="$rss" -v sz="$size" 'BEGIN {
        printf "| %s | %.1f | %.1f | %.2f× | %.0f | %.0f | %.2f× | %s | %.0f MiB / %.0f MiB |\n", t, a, b, a / b, c, d, c / d,
            (bd > 0 ? sprintf("%.0f%% of %.1f", 100 * a / bd, bd) : "-"), rss / 1024, sz / 1048576 }'
done
