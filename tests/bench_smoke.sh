#!/usr/bin/env bash
# bench_smoke.sh KVSERVE_BIN [DATA_DIR] — a short run of scripts/bench_serving against a real
# `kvserve serve` on loopback (stories260K from DATA_DIR, default tests/data):
# a handful of streamed requests on both endpoints; fails unless every request completes, the JSON
# summary has the metric keys, and the server drains and exits 0 on SIGTERM. Bounded in time.
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
data=${2:-$root/tests/data}
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
model="$data/stories260K.gguf"
[ -s "$model" ] || { echo "bench smoke: $model is missing" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" serve -m "$model" --port "$port" --threads 2 --kv-memory 64MiB 2>"$tmp/server.log" &
pid=$!
for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
    sleep 0.1
done
run() { # name, flags...
    local name=$1
    shift
    timeout 60 python3 "$root/scripts/bench_serving" --base-url "http://127.0.0.1:$port" --seed 3 \
        --num-warmups 1 --max-duration 30 --save-json "$tmp/$name.json" "$@" >"$tmp/$name.txt" 2>&1 ||
        { cat "$tmp/$name.txt" >&2; exit 1; }
    python3 - "$tmp/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
want = len(r["requests"])
assert r["completed"] == want and r["failed"] == 0 and want > 0, (sys.argv[2], r["completed"], r["failed"])
for k in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "output_throughput", "request_throughput"):
    assert k in r, (sys.argv[2], k)
assert r["output_throughput"] > 0
print(f"{sys.argv[2]}: {r['completed']} requests, {r['output_throughput']:.1f} output tok/s, "
      f"mean TTFT {r['mean_ttft_ms']:.1f} ms")
PY
}
run random --dataset random --num-prompts 6 --random-input-len 32 --random-output-len 16 --max-concurrency 3
run chat --dataset multi-turn --endpoint chat --mt-num-conversations 2 --mt-turns 2 --mt-question-len 16 \
    --mt-output-len 8 --max-concurrency 2
run prefix --dataset shared-prefix --gsp-num-groups 1 --gsp-prompts-per-group 4 --gsp-system-prompt-len 64 \
    --gsp-question-len 8 --gsp-output-len 8 --max-concurrency 2
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); h=r.get("prefix_cache_hit_rate"); assert h is not None and h > 0, h; print("prefix hit rate", h)' "$tmp/prefix.json"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" -eq 0 ] || { echo "server exited $rc after SIGTERM" >&2; cat "$tmp/server.log" >&2; exit 1; }
echo "bench smoke: ok"
