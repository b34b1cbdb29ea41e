#!/usr/bin/env bash
# bench_moe.sh — CPU decode of a mixture of experts against its dense twin, and against llama.cpp.
#
#   scripts/bench_moe.sh [KVSERVE_BIN]
#
# Writes two synthetic Q8_0 models with `kvserve mkmodel` into $KVSERVE_BENCH_DIR (default: a
# kvserve-bench folder under $TMPDIR or /tmp): a Qwen3-MoE shape (dim 1024, 8 layers, 16 / 8
# heads, 16 experts of width 512, 2 used, vocab 32000) and its dense qwen3 twin with ffn 1024 —
# the same active parameters per token. Then, $ROUNDS times (default 5), interleaved, runs
# `kvserve generate -n 128 --ignore-eos` on each with $THREADS threads (default 2) and, with
# LLAMA_BENCH set to a llama-bench command, `llama-bench -p 0 -n 128 -r 1 -t $THREADS` on each,
# and prints the medians: decode tok/s, MoE / dense and kvserve / llama.cpp.
set -euo pipefail

BIN=${1:-build/kvserve}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
mkdir -p "$DIR"
common=(--dim 1024 --layers 8 --heads 16 --kv-heads 8 --vocab 32000 --context 2048 --type q8_0)
[ -s "$DIR/moe-dense.gguf" ] || "$BIN" mkmodel -o "$DIR/moe-dense.gguf" --arch qwen3 --ffn 1024 "${common[@]}" >&2
[ -s "$DIR/moe-16x512.gguf" ] ||
    "$BIN" mkmodel -o "$DIR/moe-16x512.gguf" --arch qwen3moe --ffn 512 --experts 16 --experts-used 2 "${common[@]}" >&2

# shellcheck disable=SC2086 # the medians take word-split lists of figures
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
err=$(mktemp)
trap 'rm -f "$err"' EXIT
declare -A k l
for _ in $(seq 1 "$ROUNDS"); do
    for m in moe-dense moe-16x512; do
        "$BIN" generate -m "$DIR/$m.gguf" -n 128 --ignore-eos --temperature 0 --threads "$THREADS" --device cpu \
            >/dev/null 2>"$err"
        k[$m]+=" $(tail -n 1 "$err" | sed -n 's/.*"decode_tokens_per_s": *\([0-9.eE+-]*\).*/\1/p')"
        if [ -n "${LLAMA_BENCH:-}" ]; then
            # shellcheck disable=SC2086
            l[$m]+=" $($LLAMA_BENCH -m "$DIR/$m.gguf" -t "$THREADS" -p 0 -n 128 -r 1 -o json 2>/dev/null |
                python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["avg_ts"])')"
        fi
    done
done
# shellcheck disable=SC2086
kd=$(median ${k[moe-dense]}) km=$(median ${k[moe-16x512]})
echo "threads $THREADS, $ROUNDS rounds; kvserve decode tok/s: dense ${k[moe-dense]}; moe ${k[moe-16x512]}"
printf '| model | kvserve decode tok/s (median) | llama.cpp | kvserve / llama.cpp |\n|---|---:|---:|---:|\n'
for m in moe-dense moe-16x512; do
    # shellcheck disable=SC2086
    kv=$(median ${k[$m]})
    if [ -n "${LLAMA_BENCH:-}" ]; then
        # shellcheck disable=SC2086
        ll=$(median ${l[$m]})
        echo "llama.cpp $m: ${l[$m]}" >&2
        awk -v m="$m" -v k="$kv" -v l="$ll" 'BEGIN { printf "| %s | %.1f | %.1f | %.2f |\n", m, k, l, k / l }'
    else
        awk -v m="$m" -v k="$kv" 'BEGIN { printf "| %s | %.1f | - | - |\n", m, k }'
    fi
done
awk -v d="$kd" -v m="$km" 'BEGIN { printf "MoE / dense decode: %.2f\n", m / d }'
