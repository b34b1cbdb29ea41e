#!/usr/bin/env bash
# bench.sh — `make bench`: every benchmark, numbers only (never a gate).
#   BENCH="generate engine serving structured" selects the parts (default: all four).
#   generate: single-stream `kvserve generate` speed vs llama.cpp (scripts/bench_generate.sh)
#   engine:   offline `kvserve bench` throughput, batching and prefix-cache figures (scripts/bench_engine.sh)
#   serving:  the HTTP serving matrix with scripts/bench_serving (scripts/bench_matrix.sh)
#   structured: decode under a JSON schema against unconstrained, mask and compile costs (scripts/bench_structured.sh)
set -euo pipefail
BIN=${1:-build/kvserve}
HERE=$(cd "$(dirname "$0")" && pwd)
PARTS=${BENCH:-generate engine serving structured}
for p in $PARTS; do
    case $p in
    generate) "$HERE/bench_generate.sh" "$BIN" ;;
    engine) "$HERE/bench_engine.sh" "$BIN" ;;
    serving) "$HERE/bench_matrix.sh" "$BIN" bench-out ;;
    structured) "$HERE/bench_structured.sh" "$BIN" ;;
    *) echo "unknown benchmark part '$p'" >&2; exit 2 ;;
    esac
done
