#!/usr/bin/env bash
# bench_generate.sh — single-stream speed of `kvserve generate` on synthetic TinyLlama-shaped models
# (110m-*, 1.1b-*) and SmolLM-135M-shaped ones (135m-*; MODELS picks them, e.g. MODELS=135m-q8_0).
#
#   scripts/bench_generate.sh [KVSERVE_BIN] [BENCH_BIN]
#
# Writes the models with `kvserve mkmodel` into $KVSERVE_BENCH_DIR (default: a kvserve-bench
# folder under $TMPDIR or /tmp; ~2.2 GB in all, reused between runs), then for each model runs,
# with $THREADS threads (default 2), $ROUNDS times (default 3) and takes the median of:
#   decode  — `generate -n 128 --ignore-eos --temperature 0` from the empty prompt (batch 1)
#   prompt  — `generate -n 1` on a prompt of 512 tokens (one prefill step)
# and prints a markdown table next to llama.cpp's llama-bench figures for the same shapes, plus
# decode as a fraction of the memory-bandwidth bound (bench/bench_generate).
# With LLAMA_BENCH set to a llama-bench command, llama.cpp is measured in the same run instead
# (`llama-bench -p 512 -n 128 -r 1 -t $THREADS` once per round, interleaved with kvserve's runs,
# median of the rounds) and the table adds kvserve / llama.cpp ratios. KVSERVE_CPU_ISA passes
# through to kvserve (e.g. KVSERVE_CPU_ISA=avx2 next to a llama.cpp limited to AVX2).
set -euo pipefail

BIN=${1:-build/kvserve}
BENCH=${2:-$(dirname "$BIN")/bench/bench_generate}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
MODELS=${MODELS:-"110m-f32 110m-f16 110m-q8_0 1.1b-q8_0"}
mkdir -p "$DIR"

shape() { # name -> mkmodel flags
    case "$1" in
    110m-*) echo "--dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000 --context 2048 --type ${1#110m-}" ;;
    1.1b-*) echo "--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 --context 2048 --type ${1#1.1b-}" ;;
    135m-*) echo "--dim 576 --layers 30 --heads 9 --kv-heads 3 --ffn 1536 --vocab 49152 --context 2048 --type ${1#135m-}" ;;
    esac
}

llama_cpp() { # name -> "decode prompt" of llama-bench, 2 threads, same machine kind
    case "$1" in
    110m-q8_0) echo "195 770" ;;
    110m-f16) echo "154 803" ;;
    110m-f32) echo "60 1024" ;;
    1.1b-q8_0) echo "14.7 75" ;;
    *) echo "- -" ;;
    esac
}

json_field() { # file key -> value from the last line (a JSON object)
    tail -n 1 "$1" | sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p"
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

llama_bench() { # model -> "decode prompt" tok/s of one llama-bench run (nothing when it failed)
    # shellcheck disable=SC2086
    { $LLAMA_BENCH -m "$1" -t "$THREADS" -p 512 -n 128 -r 1 -o json 2>/dev/null || true; } | python3 -c '
import json, sys
try:
    r = {("pp" if t["n_prompt"] else "tg"): t["avg_ts"] for t in json.load(sys.stdin)}
    print(r["tg"], r["pp"])
except (ValueError, KeyError, TypeError):
    sys.stderr.write("llama-bench gave no figures for this round\n")'
}

ratio() { # kvserve llama format -> "llama (k/l×)", or "-" without llama figures
    if [ -z "$2" ]; then echo "-"; else awk -v k="$1" -v l="$2" -v f="$3" 'BEGIN { printf f " (%.2f×)", l, k / l }'; fi
}

for m in $MODELS; do
    f="$DIR/$m.gguf"
    if [ ! -s "$f" ]; then
        echo "writing $f" >&2
        # shellcheck disable=SC2046
        "$BIN" mkmodel -o "$f" $(shape "$m") >&2
    fi
done

# A prompt of exactly 512 tokens: grow a word list until the tokenizer counts 512.
first=$(echo "$MODELS" | awk '{print $1}')
words=(time little girl park ball play happy friend tree house sun dog cat red big day)
prompt=""
i=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT
while :; do
    "$BIN" generate -m "$DIR/$first.gguf" -p "$prompt" -n 1 --temperature 0 --threads "$THREADS" \
        --device cpu >/dev/null 2>"$err"
    n=$(json_field "$err" prompt_tokens)
    [ "$n" -ge 512 ] && break
    # each word is usually one or a few tokens: add about as many as still missing
    add=$(( (512 - n + 3) / 4 )); [ "$add" -lt 1 ] && add=1
    for ((k = 0; k < add; k++)); do prompt+="${prompt:+ }${words[i % ${#words[@]}]}"; i=$((i + 1)); done
done
while [ "$n" -gt 512 ]; do # trim one character at a time
    prompt=${prompt%?}
    "$BIN" generate -m "$DIR/$first.gguf" -p "$prompt" -n 1 --temperature 0 --threads "$THREADS" \
        --device cpu >/dev/null 2>"$err"
    n=$(json_field "$err" prompt_tokens)
done
echo "prompt: $n tokens" >&2

bw=""
if [ -x "$BENCH" ]; then
    # shellcheck disable=SC2046
    bw=$("$BENCH" -t "$THREADS" $(for m in $MODELS; do echo "$DIR/$m.gguf"; done))
    echo "$bw" >&2
else
    echo "($BENCH not built: no bandwidth bound; 'make bench-progs' builds it)" >&2
fi

echo
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1); kvserve level: ${KVSERVE_CPU_ISA:-best}"
echo "| model | kvserve decode tok/s | llama.cpp decode | kvserve prompt tok/s ($n tokens) | llama.cpp prompt | decode / bandwidth bound |"
echo "|---|---:|---:|---:|---:|---:|"
for m in $MODELS; do
    f="$DIR/$m.gguf"
    dec=() pp=() ldec=() lpp=()
    for _ in $(seq 1 "$ROUNDS"); do
        if [ -n "${LLAMA_BENCH:-}" ]; then
            read -r a b <<<"$(llama_bench "$f")" || true
            [ -n "$b" ] && ldec+=("$a") lpp+=("$b")
        fi
        "$BIN" generate -m "$f" -n 128 --ignore-eos --temperature 0 --threads "$THREADS" --device cpu \
            >/dev/null 2>"$err"
        dec+=("$(json_field "$err" decode_tokens_per_s)")
        "$BIN" generate -m "$f" -p "$prompt" -n 1 --temperature 0 --threads "$THREADS" --device cpu \
            >/dev/null 2>"$err"
        pp+=("$(json_field "$err" prefill_tokens_per_s)")
    done
    d=$(median "${dec[@]}")
    p=$(median "${pp[@]}")
    if [ -n "${LLAMA_BENCH:-}" ]; then
        ld=$(ratio "$d" "$(median "${ldec[@]}")" %.1f) lp=$(ratio "$p" "$(median "${lpp[@]}")" %.0f)
    else
        read -r ld lp <<<"$(llama_cpp "$m")"
    fi
    bound=$(echo "$bw" | grep -F "$f:" | sed -n 's/.*bound \([0-9.]*\) tok\/s (memcpy), \([0-9.]*\) tok\/s (read).*/\2/p')
    frac=$(awk -v d="$d" -v b="$bound" 'BEGIN { if (b > 0) printf "%.0f%% of %.1f", 100 * d / b, b; else print "-" }')
    printf '| %s | %.1f | %s | %.0f | %s | %s |\n' "$m" "$d" "$ld" "$p" "$lp" "$frac"
done
