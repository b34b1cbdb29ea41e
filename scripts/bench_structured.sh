#!/usr/bin/env bash
# bench_structured.sh — the cost of structured outputs: decode throughput under a JSON schema
# against unconstrained decoding, at 1 and 16 sequences, on the TinyLlama-110M-shaped Q8_0 model
# (the shape of scripts/bench_generate.sh), plus the schema's compile time and the mask time per
# token (bench/bench_grammar, CPU time). Numbers only, never a gate.
#
#   scripts/bench_structured.sh [KVSERVE_BIN]      PARTS="kvserve llama.cpp" (default: both)
#
# The schema (written to $DIR/bench_schema.json) has 10 properties: integer and number ranges,
# bounded strings, an email and a date format, an enum, an array of strings, a nested object
# with a pattern, and an anyOf with null. Its objects are the items of an array, so that every
# request stays inside the structure for its whole output (greedy, --output-len tokens, end of
# generation ignored, the same token counts as the unconstrained run). Runs alternate
# constrained / unconstrained, 3 times each, and the medians are printed: wall-clock tok/s, and
# CPU seconds per 1000 output tokens (the CPU ratio = unconstrained ÷ constrained cost). When the llama.cpp
# anchor is present ($LLAMA_RUN, default ../shared/anchors/llama.cpp/run) the same requests go to
# llama-server with and without "json_schema" in the same session, for reference.
set -euo pipefail

BIN=${1:-build/kvserve}
THREADS=${THREADS:-2}
DIR=${KVSERVE_BENCH_DIR:-${TMPDIR:-/tmp}/kvserve-bench}
OUT_LEN=${OUT_LEN:-256}   # tokens per request; REQS_1 / REQS_16: requests at 1 / 16 sequences (3 / 32)
LLAMA_RUN=${LLAMA_RUN:-../shared/anchors/llama.cpp/run}
mkdir -p "$DIR"
MODEL="$DIR/110m-q8_0.gguf"
if [ ! -s "$MODEL" ]; then
    echo "writing $MODEL" >&2
    "$BIN" mkmodel -o "$MODEL" --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 --vocab 32000 \
        --context 2048 --type q8_0 >&2
fi
SCHEMA="$DIR/bench_schema.json"
cat >"$SCHEMA" <<'EOF'
{"type": "array", "maxItems": 1000, "items": {
  "type": "object",
  "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 100000},
    "name": {"type": "string", "maxLength": 24},
    "email": {"type": "string", "format": "email"},
    "status": {"enum": ["active", "inactive", "pending"]},
    "score": {"type": "number", "minimum": 0, "maximum": 100},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5},
    "address": {"type": "object", "properties": {
        "street": {"type": "string", "maxLength": 32},
        "city": {"type": "string", "maxLength": 20},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["street", "city", "zip"]},
    "verified": {"type": "boolean"},
    "created": {"type": "string", "format": "date"},
    "notes": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]}
  },
  "required": ["id", "name", "email", "status", "score", "tags", "address", "verified", "created", "notes"]}}
EOF

json_field() { # file key -> value from the last line (a JSON object)
    tail -n 1 "$1" | sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p"
}
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
    "$(grep -o -m1 -w 'avx512f' /proc/cpuinfo >/dev/null && echo AVX-512 || echo AVX2), $THREADS threads;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# CPU seconds per 1000 output tokens (user + sys of the bench process) stay meaningful when the
# machine is shared; tok/s (wall clock) does not.
cpu_of() { # command... -> prints user+sys seconds of the command on fd 3
    local TIMEFORMAT='%U %S'
    { time "$@" >"$out" 2>/dev/null; } 2>&1 | awk '{ print $1 + $2 }'
}
# Per-token costs in CPU time of one thread (bench/bench_grammar): robust to a shared machine.
GBENCH=$(dirname "$BIN")/bench/bench_grammar
if [ -x "$GBENCH" ]; then
    echo
    "$GBENCH" "$MODEL" "$SCHEMA" | sed '$d'
else
    echo "($GBENCH not built: 'make bench-progs' builds it)" >&2
fi

PARTS=${PARTS:-kvserve llama.cpp}
if [[ " $PARTS " == *" kvserve "* ]]; then
echo
echo "| sequences | unconstrained tok/s | with the schema tok/s | ratio | CPU s / 1k tokens, unconstrained | with the schema | CPU ratio | mask µs per token | compile ms (CPU) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for seqs in 1 16; do
    reqs=$((seqs == 1 ? ${REQS_1:-3} : ${REQS_16:-32}))
    plain=() cons=() mask=() comp=() cpu_p=() cpu_c=()
    for r in 1 2 3; do
        for mode in plain schema; do
            extra=()
            [ "$mode" = schema ] && extra=(--json-schema "$SCHEMA")
            cpu=$(cpu_of "$BIN" bench -m "$MODEL" --requests "$reqs" --input-len 32 --output-len "$OUT_LEN" --max-seqs "$seqs" \
                --threads "$THREADS" --device cpu --seed "$r" --json "${extra[@]}")
            tps=$(json_field "$out" output_tokens_per_s)
            per_k=$(awk -v c="$cpu" -v n="$(json_field "$out" output_tokens)" 'BEGIN { printf "%.3f", 1000 * c / n }')
            if [ "$mode" = plain ]; then plain+=("$tps") cpu_p+=("$per_k"); else
                cons+=("$tps") cpu_c+=("$per_k")
                mask+=("$(json_field "$out" grammar_mask_us)")
                comp+=("$(json_field "$out" grammar_compile_ms)")
            fi
        done
    done
    p=$(median3 "${plain[@]}") c=$(median3 "${cons[@]}") cp=$(median3 "${cpu_p[@]}") cc=$(median3 "${cpu_c[@]}")
    printf '| %d | %.1f | %.1f | %.3f | %.3f | %.3f | %.3f | %.1f | %.2f |\n' "$seqs" "$p" "$c" \
        "$(awk -v a="$c" -v b="$p" 'BEGIN { print a / b }')" "$cp" "$cc" "$(awk -v a="$cp" -v b="$cc" 'BEGIN { print a / b }')" \
        "$(median3 "${mask[@]}")" "$(median3 "${comp[@]}")"
done
fi

# ---- llama.cpp for reference (same model, same schema, llama-server's own timings) ----------
[[ " $PARTS " == *" llama.cpp "* ]] || exit 0
if [ ! -x "$LLAMA_RUN" ]; then
    echo "(llama.cpp anchor not found at $LLAMA_RUN: no side-by-side figures)" >&2
    exit 0
fi
port=$((20000 + RANDOM % 20000))
"$LLAMA_RUN" llama-server -m "$MODEL" -t "$THREADS" -np 16 -c $((16 * (OUT_LEN + 64))) --host 127.0.0.1 --port "$port" \
    --no-ui >"$out.llama" 2>&1 &
lpid=$!
trap 'kill $lpid 2>/dev/null; rm -f "$out" "$out.llama"' EXIT
up=0
for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && { up=1; break; }
    kill -0 $lpid 2>/dev/null || break
    sleep 0.5
done
if [ $up = 0 ]; then
    echo "(llama-server did not start: no side-by-side figures)" >&2
    tail -n 3 "$out.llama" >&2
    exit 0
fi
python3 - "$port" "$SCHEMA" "$OUT_LEN" <<'EOF'
import json, statistics, sys, threading, time, urllib.request
port, schema, n = int(sys.argv[1]), json.load(open(sys.argv[2])), int(sys.argv[3])
# random weights on the SPM vocabulary emit byte tokens that are not UTF-8: ban them unconstrained
bias = [[i, False] for i in range(3, 259)]
def one(body, res):
    req = urllib.request.Request("http://127.0.0.1:%d/completion" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    res.append(json.load(urllib.request.urlopen(req, timeout=600)))
def run(seqs, constrained):
    body = {"prompt": "Once upon a time", "n_predict": n, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    if constrained: body["json_schema"] = schema
    else: body["logit_bias"] = bias
    res = []
    th = [threading.Thread(target=one, args=(body, res)) for _ in range(seqs)]
    t0 = time.time()
    for t in th: t.start()
    for t in th: t.join()
    return sum(r["timings"]["predicted_n"] for r in res) / (time.time() - t0)
print("\nllama.cpp llama-server, same session:\n")
print("| sequences | unconstrained tok/s | with the schema tok/s | ratio |\n|---:|---:|---:|---:|")
for seqs in (1, 16):
    p, c = [], []
    for _ in range(3):
        p.append(run(seqs, False)); c.append(run(seqs, True))
    mp, mc = statistics.median(p), statistics.median(c)
    print("| %d | %.1f | %.1f | %.3f |" % (seqs, mp, mc, mc / mp))
EOF
