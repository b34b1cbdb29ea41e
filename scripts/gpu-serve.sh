#!/bin/sh
# gpu-serve.sh — the serving table of `scripts/gpu-check.sh --serve`: kvserve end to end on the
# GPU with TinyLlama-1.1B-shaped synthetic models made on the spot by `kvserve mkmodel`:
#   1. `kvserve generate` at 1 sequence, bf16 and q8_0 weights (decode tok/s, and the bound and
#      fraction it reports on a GPU);
#   2. the engine bench: `kvserve bench`, 512 requests of 256 prompt / 128 output tokens at up to
#      256 sequences (bf16); its step by phase at 1, 64 and 256 streams, overlapped and not, and
#      the per-step token budget's sweep (1024 to 8192) at 256 (engine-steps.txt has the JSON);
#   3. `kvserve serve --device cuda` + scripts/bench_serving at 1, 16, 64 and 256 streams
#      (256-token prompts, 128 output tokens, ignore_eos), bf16.
# Meant to finish in under 10 minutes on an H200; every step has its own time limit. Results go
# to OUTDIR: serving.md (the table), serving.tsv, each step's JSON and log.
#
#   scripts/gpu-serve.sh OUTDIR
#
# The kvserve binary: .gpu/kvserve with the libraries of .gpu/lib (laid out by `gpu-check.sh
# --prepare` on a machine with the build's -dev packages), else build/kvserve. KVSERVE_BIN
# overrides both. KVSERVE_SERVE_SMOKE=1 runs the same pipeline on the CPU with tiny models and
# small counts, to check the script itself without a GPU (tests/test_gpu_scripts.c).
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-build/gpu-serve-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -n "${KVSERVE_BIN:-}" ]; then
    BIN=$KVSERVE_BIN
elif [ -x .gpu/kvserve ]; then
    BIN=$(pwd)/.gpu/kvserve
    LD_LIBRARY_PATH=$(pwd)/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
else
    BIN=$(pwd)/build/kvserve
fi
[ -x "$BIN" ] || { echo "gpu-serve: no kvserve binary ($BIN): run make, or gpu-check.sh --prepare" >&2; exit 2; }
"$BIN" --help >/dev/null 2>&1 || { echo "gpu-serve: $BIN does not start (missing libraries?)" >&2; exit 2; }

if [ "${KVSERVE_SERVE_SMOKE:-0}" = 1 ]; then
    DEVICE=cpu
    SHAPE="--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --context 1024"
    N_GEN=16 REQUESTS=8 IN_LEN=24 OUT_LEN=8 SEQS=4 STREAMS="1 4" PER_STREAM=2 PORT=${PORT:-18321}
    STEP_STREAMS="1 4" BUDGETS="32 64"
    EXTRA="--threads 2 --kv-memory 64MiB"
else
    DEVICE=cuda
    SHAPE="--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000 --context 2048"
    N_GEN=256 REQUESTS=512 IN_LEN=256 OUT_LEN=128 SEQS=256 STREAMS="1 16 64 256" PER_STREAM=4 PORT=${PORT:-18321}
    STEP_STREAMS="1 64 256" BUDGETS="1024 2048 4096 8192"
    EXTRA=""
fi
MODELS=${KVSERVE_SERVE_MODELS:-$OUT}
TSV=$OUT/serving.tsv
: >"$TSV"
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$TSV"; echo "  $1: $2 $3"; }
# the value of "key" in a one-line JSON object
field() { printf '%s' "$1" | sed -n "s/.*\"$2\": *\([-0-9.eE+]*\).*/\1/p"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
T0=$(date +%s)

echo "gpu-serve: $BIN on $DEVICE, results in $OUT"
for t in bf16 q8_0; do
    m=$MODELS/serve-$t.gguf
    [ -s "$m" ] && continue
    # shellcheck disable=SC2086
    timeout 180 "$BIN" mkmodel -o "$m" $SHAPE --type "$t" --seed 7 >"$OUT/mkmodel-$t.log" 2>&1 ||
        { echo "gpu-serve: mkmodel $t failed (see $OUT/mkmodel-$t.log)" >&2; exit 1; }
done
echo "  models ready after $(elapsed) s"

# 1. generate at one sequence
for t in bf16 q8_0; do
    # shellcheck disable=SC2086
    if timeout 120 "$BIN" generate -m "$MODELS/serve-$t.gguf" --device "$DEVICE" $EXTRA -p "Once upon a time" \
        -n "$N_GEN" --temperature 0 --ignore-eos >/dev/null 2>"$OUT/generate-$t.log"; then
        j=$(tail -n 1 "$OUT/generate-$t.log")
        echo "$j" >"$OUT/generate-$t.json"
        bound=$(field "$j" bound_tokens_per_s)
        frac=$(field "$j" fraction_of_bound)
        row "generate $t, 1 sequence" "$(field "$j" decode_tokens_per_s) tok/s" \
            "${bound:+bound $bound tok/s, $(awk "BEGIN{printf \"%.0f%%\", 100*$frac}") of it}"
    else
        row "generate $t, 1 sequence" "FAILED" "see generate-$t.log"
    fi
done

# 2. the engine bench
# shellcheck disable=SC2086
if timeout 240 "$BIN" bench -m "$MODELS/serve-bf16.gguf" --device "$DEVICE" $EXTRA --requests "$REQUESTS" \
    --input-len "$IN_LEN:$IN_LEN" --output-len "$OUT_LEN:$OUT_LEN" --max-seqs "$SEQS" --seed 1 --json \
    >"$OUT/bench.log" 2>&1; then
    j=$(tail -n 1 "$OUT/bench.log")
    echo "$j" >"$OUT/bench.json"
    row "engine bench bf16, $REQUESTS req, $IN_LEN in / $OUT_LEN out, $SEQS seqs" \
        "$(field "$j" output_tokens_per_s) tok/s" \
        "TTFT $(field "$j" ttft_ms_mean) ms, TPOT $(field "$j" tpot_ms_mean) ms"
else
    row "engine bench bf16" "FAILED" "see bench.log"
fi
echo "  engine bench done after $(elapsed) s"

# 2b. the engine's step by phase (kvserve_step_seconds: schedule, upload, forward, sample, output, in
# the JSON's step_ms) at 1, 64 and 256 streams, overlapped and not; then the per-step token budget
# at the most streams, its TTFT against its TPOT (docs/gpu.md: the prefill budget)
: >"$OUT/engine-steps.txt"
for c in $STEP_STREAMS; do
    for ov in on off; do
        # shellcheck disable=SC2086
        j=$(timeout 120 "$BIN" bench -m "$MODELS/serve-bf16.gguf" --device "$DEVICE" $EXTRA --requests $((c * PER_STREAM)) \
            --input-len "$IN_LEN:$IN_LEN" --output-len "$OUT_LEN:$OUT_LEN" --max-seqs "$c" --overlap "$ov" --seed 1 \
            --json 2>/dev/null | tail -n 1) || j=""
        echo "streams $c overlap $ov: ${j:-FAILED}" >>"$OUT/engine-steps.txt"
        if [ -n "$j" ]; then
            step=$(printf '%s' "$j" | sed -n 's/.*"step_ms": *{\([^}]*\)}.*/\1/p' | tr -d '" ')
            row "engine steps, $c streams, overlap $ov" "$(field "$j" output_tokens_per_s) tok/s" \
                "TPOT $(field "$j" tpot_ms_mean) ms; ms per step $step"
        else
            row "engine steps, $c streams, overlap $ov" "FAILED" "see engine-steps.txt"
        fi
    done
done
for mbt in $BUDGETS; do
    # shellcheck disable=SC2086
    j=$(timeout 120 "$BIN" bench -m "$MODELS/serve-bf16.gguf" --device "$DEVICE" $EXTRA --requests $((SEQS * PER_STREAM)) \
        --input-len "$IN_LEN:$IN_LEN" --output-len "$OUT_LEN:$OUT_LEN" --max-seqs "$SEQS" --max-batch-tokens "$mbt" \
        --seed 1 --json 2>/dev/null | tail -n 1) || j=""
    echo "streams $SEQS max-batch-tokens $mbt: ${j:-FAILED}" >>"$OUT/engine-steps.txt"
    if [ -n "$j" ]; then
        row "engine budget $mbt tokens, $SEQS streams" "$(field "$j" output_tokens_per_s) tok/s" \
            "TTFT $(field "$j" ttft_ms_mean) ms, TPOT $(field "$j" tpot_ms_mean) ms"
    else
        row "engine budget $mbt tokens, $SEQS streams" "FAILED" "see engine-steps.txt"
    fi
done
echo "  engine steps done after $(elapsed) s"

# 3. serve + bench_serving
# shellcheck disable=SC2086
"$BIN" serve -m "$MODELS/serve-bf16.gguf" --device "$DEVICE" $EXTRA --port "$PORT" --max-seqs "$SEQS" \
    >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT INT TERM
up=0
for _ in $(seq 1 240); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
        2>/dev/null; then
        up=1
        break
    fi
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.5
done
if [ "$up" = 1 ]; then
    for c in $STREAMS; do
        n=$((c * PER_STREAM))
        [ "$n" -lt 16 ] && n=16
        if timeout 240 python3 scripts/bench_serving --base-url "http://127.0.0.1:$PORT" --dataset random \
            --random-input-len "$IN_LEN" --random-output-len "$OUT_LEN" --num-prompts "$n" --max-concurrency "$c" \
            --ignore-eos --seed 1 --save-json "$OUT/serving-c$c.json" >"$OUT/serving-c$c.log" 2>&1; then
            s=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d.get('summary', d); \
print('%.0f tok/s\t%d/%d ok, TTFT %.1f ms, TPOT %.2f ms' % (s['output_throughput'], s['completed'], \
s['completed'] + s.get('failed', 0), s['mean_ttft_ms'], s['mean_tpot_ms']))" "$OUT/serving-c$c.json" 2>/dev/null) ||
                s="?	see serving-c$c.log"
            row "serve bf16, $c streams, $n req" "${s%%	*}" "${s#*	}"
        else
            row "serve bf16, $c streams" "FAILED" "see serving-c$c.log"
        fi
    done
else
    row "serve bf16" "FAILED" "the server did not come up (see serve.log)"
fi
kill "$SERVER" 2>/dev/null || true
wait "$SERVER" 2>/dev/null || true
trap - EXIT INT TERM

{
    echo "| serving ($DEVICE, $(date -u +%Y-%m-%d)) | value | detail |"
    echo "|---|---:|---|"
    awk -F '\t' '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$TSV"
} >"$OUT/serving.md"
echo "gpu-serve: done in $(elapsed) s"
cat "$OUT/serving.md"
grep -q FAILED "$TSV" && exit 1
exit 0
