#!/usr/bin/env bash
# run.sh BIN MODEL [ARGS...] — used by `make run`: prints where the server will listen and a
# curl example, then replaces itself with `BIN serve -m MODEL ARGS...`.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 KVSERVE_BIN MODEL.gguf [serve options]" >&2
    exit 2
fi
bin=$1 model=$2
shift 2
host=127.0.0.1 port=8000 name=$(basename "$model" .gguf) key=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    a=${args[i]} next=${args[i+1]:-}
    case $a in
        --host) host=$next ;; --host=*) host=${a#*=} ;;
        --port) port=$next ;; --port=*) port=${a#*=} ;;
        --served-model-name) name=$next ;; --served-model-name=*) name=${a#*=} ;;
        --api-key) key=$next ;; --api-key=*) key=${a#*=} ;;
    esac
done
case $host in 0.0.0.0 | "") show=127.0.0.1 ;; *:*) show="[$host]" ;; *) show=$host ;; esac
url="http://$show:$port"
auth=
[ -n "$key" ] && auth=" -H 'Authorization: Bearer $key'"
cat <<MSG
kvserve: starting on $url with model '$name' ($model)
  try:  curl $url/v1/completions$auth -H 'Content-Type: application/json' \\
          -d '{"model": "$name", "prompt": "Once upon a time", "max_tokens": 32}'
  chat: curl -N $url/v1/chat/completions$auth -H 'Content-Type: application/json' \\
          -d '{"messages": [{"role": "user", "content": "Tell me a story"}], "stream": true}'
  stop with Ctrl-C (graceful drain)
MSG
exec "$bin" serve -m "$model" "$@"
