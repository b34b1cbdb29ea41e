# benchlib.sh — shell helpers the benchmark scripts source (bench_engine.sh, bench_kv.sh):
#   bench_110m_model DIR BIN  writes (once) and prints the path of the TinyLlama-110M-shaped Q8_0
#                             model with random weights that the decode figures use;
#   field JSON KEY            a number field of `kvserve bench --json`'s one-line result;
#   median X...               the median of numbers (the upper one of an even count).

bench_110m_model() {
    local model="$1/110m-q8_0.gguf"
    mkdir -p "$1"
    if [ ! -s "$model" ]; then
        echo "writing $model" >&2
        "$2" mkmodel -o "$model" --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 \
            --vocab 32000 --context 2048 --type q8_0 >&2
    fi
    printf '%s\n' "$model"
}

field() { sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" <<<"$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
