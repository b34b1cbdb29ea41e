#!/usr/bin/env bash
# bench_cluster.sh — routing keys compared: the table of docs/scale-out.md.
#
#   scripts/bench_cluster.sh [KVSERVE_BIN] [OUTDIR]
#
# Starts `scripts/cluster` on the synthetic TinyLlama-110M-shaped Q8_0 model (written once with
# `kvserve mkmodel`, as scripts/bench_matrix.sh does): once with 1 replica (the baseline), then
# with 3 replicas (the threads split between them) routed by plain round-robin, by a plain
# consistent hash, by the bounded-load hash, by the default config (bounded-load hash + stick
# table) and by least connections + stick table. Each drives the multi-turn chat and
# shared-prefix workloads of the serving matrix through HAProxy, once keyed on the body and once
# with --session-header; the same seeds in every setup, so the same prompts. Results:
# OUTDIR/*.json (bench_serving --save-json) and OUTDIR/results.md (docs/scale-out.md's compact table,
# then every run: hit rate from the responses' usage, ratio to 1 replica, requests and
# conversations per replica, mean TTFT). Environment: THREADS (all replicas together, default 2),
# KVSERVE_BENCH_DIR (where the model file is kept), SETUPS (the setups to run, default all; the
# table is made from whatever JSON OUTDIR holds). Every run is bounded in requests and time.
set -euo pipefail

BIN=${1:-build/kvserve}
OUT=${2:-bench-out/cluster}
THREADS=${THREADS:-2}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" "$DIR"
MODEL="$DIR/110m-q8_0.gguf"
if [ ! -s "$MODEL" ]; then
    echo "writing $MODEL" >&2
    "$BIN" mkmodel -o "$MODEL" --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 \
        --vocab 32000 --context 2048 --type q8_0 >&2
fi
MT=(--dataset multi-turn --endpoint chat --mt-num-conversations 8 --mt-turns 4 --mt-question-len 64
    --mt-output-len 32 --max-concurrency 4 --ignore-eos)
SP=(--dataset shared-prefix --gsp-num-groups 4 --gsp-prompts-per-group 8 --gsp-system-prompt-len 512
    --gsp-question-len 32 --gsp-output-len 32 --max-concurrency 8 --ignore-eos)

CLUSTER_PID=
stop_cluster() {
    if [ -n "$CLUSTER_PID" ]; then
        kill -TERM "$CLUSTER_PID" 2>/dev/null || true
        wait "$CLUSTER_PID" 2>/dev/null || true
        CLUSTER_PID=
    fi
}
trap stop_cluster EXIT

run_setup() { # name, replicas, cluster flags... (environment: the config's knobs)
    local name=$1 n=$2
    shift 2
    local port info="$OUT/$name.info.json"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    rm -f "$info"
    "$HERE/cluster" -n "$n" -m "$MODEL" --kvserve "$BIN" --port "$port" -t "$THREADS" \
        --info "$info" "$@" >/dev/null 2>>"$OUT/cluster.log" &
    CLUSTER_PID=$!
    for _ in $(seq 1 600); do
        [ -s "$info" ] && break
        kill -0 "$CLUSTER_PID" 2>/dev/null || { echo "cluster exited; see $OUT/cluster.log" >&2; exit 1; }
        sleep 0.1
    done
    [ -s "$info" ] || { echo "cluster did not come up in 60 s" >&2; exit 1; }
    local wl key seed=0
    for wl in mt sp; do
        for key in body session; do
            seed=$((seed + 1))
            local flags=() extra=()
            if [ "$wl" = mt ]; then flags=("${MT[@]}"); else flags=("${SP[@]}"); fi
            [ "$key" = session ] && extra=(--session-header)
            echo "== $name $wl $key" >&2
            "$HERE/bench_serving" --base-url "http://127.0.0.1:$port" --seed "$seed" --num-warmups 2 \
                --max-duration 600 --save-json "$OUT/$name-$wl-$key.json" "${flags[@]}" \
                ${extra[@]+"${extra[@]}"} >"$OUT/$name-$wl-$key.txt"
        done
    done
    stop_cluster
}

touch "$OUT/cluster.log"
for setup in ${SETUPS:-single roundrobin hash bounded default leastconn}; do
    case $setup in
        single) run_setup single 1 ;;
        roundrobin) run_setup roundrobin 3 --balance roundrobin ;;
        hash) KVSERVE_HASH_BALANCE_FACTOR=0 KVSERVE_STICK_MAX_INFLIGHT=0 run_setup hash 3 ;;
        bounded) KVSERVE_STICK_MAX_INFLIGHT=0 run_setup bounded 3 ;;
        default) run_setup default 3 ;;
        leastconn) run_setup leastconn 3 --balance leastconn ;;
        *) echo "unknown setup $setup" >&2; exit 2 ;;
    esac
done

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = [("single", "1 replica"), ("roundrobin", "3, round-robin"),
        ("hash", "3, consistent hash"), ("bounded", "3, hash + bounded load 150"),
        ("default", "3, hash + bounded load + stick table (default)"),
        ("leastconn", "3, least connections + stick table")]
lines = ["| workload | key | routing | done | hit rate | × 1 replica | requests per replica | "
         "conversations per replica | mean TTFT ms |", "|---|---|---|---:|---:|---:|---|---|---:|"]
for wl, wname in (("mt", "multi-turn chat 8×4, c 4"), ("sp", "shared prefix 4×8, c 8")):
    for key in ("body", "session"):
        base = json.load(open(os.path.join(out, "single-%s-%s.json" % (wl, key))))
        for name, title in rows:
            path = os.path.join(out, "%s-%s-%s.json" % (name, wl, key))
            if not os.path.exists(path):
                continue
            r = json.load(open(path))
            h, b = r["usage_cache_hit_rate"] or 0.0, base["usage_cache_hit_rate"] or 0.0
            per = lambda d: " / ".join(str((d or {}).get("replica%d" % k, 0)) for k in (1, 2, 3)) \
                if name != "single" else "-"
            lines.append("| %s | %s | %s | %d/%d | %.3f | %.2f | %s | %s | %.0f |" % (
                wname, "x-session-id" if key == "session" else "body", title, r["completed"],
                len(r["requests"]), h, h / b if b else 0.0, per(r.get("served_by_requests")),
                per(r.get("served_by_jobs")), r["mean_ttft_ms"] or 0.0))
# docs/scale-out.md's compact form: one row per routing, one column per workload and key: the hit rate,
# its ratio to 1 replica, and the conversations (groups' requests) each replica served.
cols = [("mt", "body"), ("mt", "session"), ("sp", "body"), ("sp", "session")]
short = ["| routing | multi-turn, body key | multi-turn, x-session-id | shared prefix, body key | "
         "shared prefix, x-session-id |", "|---|---|---|---|---|"]
for name, title in rows:
    cells = []
    for wl, key in cols:
        path = os.path.join(out, "%s-%s-%s.json" % (name, wl, key))
        if not os.path.exists(path):
            cells.append("-")
            continue
        r = json.load(open(path))
        b = json.load(open(os.path.join(out, "single-%s-%s.json" % (wl, key))))
        h, hb = r["usage_cache_hit_rate"] or 0.0, b["usage_cache_hit_rate"] or 0.0
        jobs = r.get("served_by_jobs") or {}
        spread = "" if name == "single" else " [%s]" % "/".join(
            str(jobs.get("replica%d" % k, 0)) for k in (1, 2, 3))
        cells.append("%.3f (%.2f×)%s" % (h, h / hb if hb else 0.0, spread))
    short.append("| %s | %s |" % (title, " | ".join(cells)))
open(os.path.join(out, "results.md"), "w").write("\n".join(short + [""] + lines) + "\n")
print("\n".join(short + [""] + lines))
PY
