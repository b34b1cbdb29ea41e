#!/usr/bin/env bash
# bench_kv.sh — the KV-cache figures of the int8/fp8 and sinks + window work, side by side with
# llama.cpp where it has the same thing:
#   1. decode at 16 sequences × 1,000 tokens of context on the TinyLlama-110M-shaped Q8_0 model:
#      kvserve with --kv-dtype f16 and int8 (`kvserve bench`, every prompt prefilled in the first
#      step, so the mean TPOT is decode alone), llama.cpp with f16 and q8_0 K/V
#      (llama-batched-bench -npp 1000 -ntg N -npl 16, its S_TG; f16 with flash attention off and
#      on), interleaved, median of RUNS;
#   2. decode speed along a stream past the context: stories260K (context 512) with
#      --kv-window 256 --kv-sinks 4, one sequence generating 512, 2048 and 8192 tokens.
# Prints Markdown tables. LLAMA=path/to/llama.cpp/run (default ../shared/anchors/llama.cpp/run)
# adds the llama.cpp rows when present.
set -euo pipefail
BIN=${1:-build/kvserve}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
NTG=${NTG:-64}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
LLAMA=${LLAMA:-../shared/anchors/llama.cpp/run}
STORIES=${STORIES:-tests/data/stories260K.gguf}
# shellcheck source=benchlib.sh
. "$(dirname "$0")/benchlib.sh"
MODEL=$(bench_110m_model "$DIR" "$BIN")

kvserve_decode() { # kv dtype -> decode tok/s of the whole batch (16 / mean TPOT)
    local j
    j=$("$BIN" bench -m "$MODEL" --threads "$THREADS" --seed 1 --json --requests 16 --input-len 1000:1000 \
        --output-len "$NTG:$NTG" --max-seqs 16 --max-batch-tokens 16000 --prefill-admit-tokens -1 \
        --no-prefix-cache --kv-dtype "$1" 2>/dev/null | tail -n 1)
    awk -v t="$(field "$j" tpot_ms_mean)" 'BEGIN { printf "%.1f", 16000 / t }'
}

llama_decode() { # cache type, flash attention on|off -> S_TG t/s of llama-batched-bench at 16 sequences
    "$LLAMA" llama-batched-bench -m "$MODEL" -t "$THREADS" -c 17000 -b 2048 -ub 512 -npp 1000 -ntg "$NTG" -npl 16 \
        -ctk "$1" -ctv "$1" -fa "$2" 2>/dev/null | awk -F'|' '/^\|[ ]*1000/ { gsub(/ /, "", $9); print $9 }' | tail -n 1
}

have_llama=0
[ -x "$LLAMA" ] && have_llama=1
k16=() k8=() l16=() l16fa=() l8=()
for _ in $(seq 1 "$RUNS"); do
    k16+=("$(kvserve_decode f16)")
    k8+=("$(kvserve_decode int8)")
    if [ "$have_llama" = 1 ]; then
        l16+=("$(llama_decode f16 off)")
        l16fa+=("$(llama_decode f16 on)")
        l8+=("$(llama_decode q8_0 on)")
    fi
done
echo "| decode, 16 sequences × 1,000 tokens of context, 110M-shaped Q8_0, $THREADS threads | tok/s (median of $RUNS) |"
echo "|---|---:|"
echo "| kvserve, --kv-dtype f16 | $(median "${k16[@]}") |"
echo "| kvserve, --kv-dtype int8 | $(median "${k8[@]}") |"
if [ "$have_llama" = 1 ]; then
    echo "| llama.cpp, -ctk f16 -ctv f16 -fa off | $(median "${l16[@]}") |"
    echo "| llama.cpp, -ctk f16 -ctv f16 -fa on | $(median "${l16fa[@]}") |"
    echo "| llama.cpp, -ctk q8_0 -ctv q8_0 -fa on (q8_0 V needs flash attention) | $(median "${l8[@]}") |"
fi
echo
echo "| one stream on stories260K (context 512), --kv-window 256 --kv-sinks 4 | mean TPOT ms (median of $RUNS) |"
echo "|---|---:|"
for n in 512 2048 8192; do
    t=()
    for _ in $(seq 1 "$RUNS"); do
        j=$("$BIN" bench -m "$STORIES" --threads 1 --seed 1 --json --requests 1 --input-len 16:16 \
            --output-len "$n:$n" --max-seqs 1 --kv-window 256 --kv-sinks 4 2>/dev/null | tail -n 1)
        t+=("$(field "$j" tpot_ms_mean)")
    done
    echo "| $n tokens generated | $(median "${t[@]}") |"
done
