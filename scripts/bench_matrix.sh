#!/usr/bin/env bash
# bench_matrix.sh — the standard serving matrix (what `make bench` runs for the HTTP server).
#
#   scripts/bench_matrix.sh [KVSERVE_BIN] [OUTDIR]
#
# On a synthetic TinyLlama-110M-shaped Q8_0 model (written once with `kvserve mkmodel`), it starts
# `kvserve serve` on a free loopback port and drives it with scripts/bench_serving:
#   random 256-in / 128-out at concurrency 1, 4 and 16;
#   shared-prefix (4 groups × 8 prompts, 512-token system prompt + 32-token question) with the
#     prefix cache on, then again on a server started with --no-prefix-cache;
#   multi-turn chat (8 conversations × 4 turns).
# Results: OUTDIR/*.json (bench_serving --save-json), OUTDIR/results.md (the table for docs/benchmarks.md)
# and OUTDIR/throughput_ttft.png (gnuplot). Every run is bounded in requests and time.
# Environment: THREADS (default 2), PROMPTS (random-dataset requests per point, default 32),
# KVSERVE_BENCH_DIR (where the model file is kept).
set -euo pipefail

BIN=${1:-build/kvserve}
OUT=${2:-bench-out}
THREADS=${THREADS:-2}
PROMPTS=${PROMPTS:-32}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" "$DIR"
MODEL="$DIR/110m-q8_0.gguf"
if [ ! -s "$MODEL" ]; then
    echo "writing $MODEL" >&2
    "$BIN" mkmodel -o "$MODEL" --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 \
        --vocab 32000 --context 2048 --type q8_0 >&2
fi

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

SERVER_PID=
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    fi
}
trap stop_server EXIT

start_server() { # extra serve flags...
    PORT=$(free_port)
    "$BIN" serve -m "$MODEL" --port "$PORT" --threads "$THREADS" --served-model-name tinyllama-110m-q8_0 \
        "$@" 2>>"$OUT/server.log" &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then return 0; fi
        kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited; see $OUT/server.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "server did not become healthy in 60 s" >&2
    exit 1
}

SEED=0
bench() { # name, bench_serving flags... (each run draws fresh prompts: no hits across runs)
    local name=$1
    shift
    SEED=$((SEED + 1))
    echo "== $name" >&2
    "$HERE/bench_serving" --base-url "http://127.0.0.1:$PORT" --seed "$SEED" --num-warmups 2 \
        --max-duration 600 --save-json "$OUT/$name.json" "$@" >"$OUT/$name.txt"
    tail -n 30 "$OUT/$name.txt" >&2
}

: >"$OUT/server.log"
start_server
for c in 1 4 16; do
    bench "random-c$c" --dataset random --random-input-len 256 --random-output-len 128 \
        --num-prompts "$PROMPTS" --max-concurrency "$c" --ignore-eos
done
SP=(--dataset shared-prefix --gsp-num-groups 4 --gsp-prompts-per-group 8 --gsp-system-prompt-len 512
    --gsp-question-len 32 --gsp-output-len 32 --max-concurrency 8 --ignore-eos)
bench shared-prefix-cache "${SP[@]}" --seed 100
bench multi-turn --dataset multi-turn --endpoint chat --mt-num-conversations 8 --mt-turns 4 \
    --mt-question-len 64 --mt-output-len 32 --max-concurrency 4 --ignore-eos
stop_server

start_server --no-prefix-cache
bench shared-prefix-nocache "${SP[@]}" --seed 100
stop_server

python3 "$HERE/bench_report.py" "$OUT"
if command -v gnuplot >/dev/null 2>&1; then
    gnuplot "$OUT/plot.gp" && echo "plot: $OUT/throughput_ttft.png" >&2
else
    echo "gnuplot not installed: no plot" >&2
fi
cat "$OUT/results.md"
