#!/bin/sh
# gpu-check.sh — build and run the CUDA backend's GPU check program (cuda/check/gpu_check.c).
#
#   scripts/gpu-check.sh [OUTDIR]              build, then run: kernels vs the CPU backend, the
#                                              stories260K golden ids on the GPU, every architecture's
#                                              logits vs the CPU backend, benchmarks; logs
#                                              and results.tsv under OUTDIR (default build/gpu-check-out)
#   scripts/gpu-check.sh --build-only          only build (CI: proves the check binary compiles and links)
#   scripts/gpu-check.sh --prepare [DATA_DIR]  copy stories260K.gguf and its golden ids (as plain text)
#                                              from DATA_DIR (default tests/data) into .gpu/ (git-ignored),
#                                              on a machine with python3; with a built build/kvserve, also
#                                              the binary and the libraries it needs beyond the C
#                                              library (ldd: libmicrohttpd, libcjson, libuv, libpcre2,
#                                              ...) into .gpu/kvserve and .gpu/lib, for a GPU machine
#                                              that has the CUDA toolkit but none of the -dev packages;
#                                              the GPU machine then needs only the work tree and .gpu/
#   scripts/gpu-check.sh --serve [OUTDIR]      the checks, then the serving table (scripts/gpu-serve.sh:
#                                              1.1B-shaped bf16 and q8_0 models made with mkmodel,
#                                              generate, the engine bench, its step breakdown at 1, 64
#                                              and 256 streams overlapped and not, the step budget's
#                                              sweep, serve + bench_serving at 1, 16, 64 and 256
#                                              streams) into OUTDIR/serving.md
#   scripts/gpu-check.sh --serve-only [OUTDIR] the serving table alone
#   scripts/gpu-check.sh --quick [OUTDIR]      smaller kernel checks and shorter benchmarks
#   scripts/gpu-check.sh --emulate             no GPU needed: run the CUDA kernels' source on the CPU
#                                              (cuda/check/attn_emu.cc, quant_emu.cc, ops_emu.cc,
#                                              dense_emu.cc, sample_emu.cc) against float64, the host's
#                                              arithmetic and the CPU's sampler
#
# Needs only the CUDA toolkit (nvcc, cuBLAS) and a C compiler: no -dev packages, no network. cuBLAS
# is not linked but loaded when the check starts its backend (cuda/cublas_dl.h): libcublas.so.N and
# libcublasLt.so.N of this toolkit, found through LD_LIBRARY_PATH, the program's RUNPATH (this
# toolkit's lib64), the ld.so cache, or next to the program.
# The program is built from the model/, engine/, cache/, cpu/ and cuda/ sources it needs and
# cli/device.c, with -arch=sm_90, into build/gpu-check/. Exit status: 0 all checks pass, 1 a check
# failed, 2 no GPU or build error.
set -eu
cd "$(dirname "$0")/.."

BUILD_ONLY=0
SERVE=0
QUICK=
while [ $# -gt 0 ]; do
    case "$1" in
    --build-only) BUILD_ONLY=1; shift ;;
    --quick) QUICK=--quick; shift ;;
    --serve) SERVE=1; shift ;;
    --serve-only) shift; exec scripts/gpu-serve.sh "${1:-build/gpu-check-out}" ;;
    --emulate)
        mkdir -p build/gpu-check
        for e in attn_emu quant_emu ops_emu dense_emu; do
            ${CXX:-c++} -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
                -Wno-unused-function -Werror -I. -o build/gpu-check/$e cuda/check/$e.cc -lpthread
        done
        ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -I. -c -o build/gpu-check/sampler.o engine/sampler.c
        ${CXX:-c++} -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
            -Werror -I. -o build/gpu-check/sample_emu cuda/check/sample_emu.cc build/gpu-check/sampler.o -lpthread -lm
        build/gpu-check/attn_emu && build/gpu-check/quant_emu && build/gpu-check/ops_emu &&
            build/gpu-check/dense_emu && exec build/gpu-check/sample_emu ;;
    --prepare)
        src=${2:-tests/data}
        G=${GPU_DIR:-.gpu} # the git-ignored folder the GPU run reads (tests point it elsewhere)
        mkdir -p "$G"
        cp "$src/stories260K.gguf" "$G/stories260K.gguf"
        python3 - "$src/stories260K.golden.json" "$G/stories260K.golden.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
with open(sys.argv[2], "w") as f:
    for c in d["cases"]:
        p, g = c["prompt_token_ids"], c["generated_token_ids"]
        f.write("%s %d %d %d %s %d %s\n" % (c["name"], 1 if c["stop_on_bos"] else 0, c["max_new_tokens"],
                len(p), " ".join(map(str, p)), len(g), " ".join(map(str, g))))
PY
        echo "gpu-check: prepared $G/stories260K.gguf and $G/stories260K.golden.txt"
        kv=${KVSERVE_BIN:-build/kvserve}
        if [ -x "$kv" ]; then
            # the binary and every library it loads but the C library's own (present everywhere)
            rm -rf "${G:?}/lib"
            mkdir -p "$G/lib"
            cp "$kv" "$G/kvserve"
            ldd "$kv" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
                case "$(basename "$lib")" in
                libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|ld-linux*) ;;
                *) cp -L "$lib" "$G/lib/" ;;
                esac
            done
            echo "gpu-check: prepared $G/kvserve and its libraries in $G/lib ($(find "$G/lib" -type f | wc -l) files)"
        else
            echo "gpu-check: no $kv: run make first for the serving table (--serve)"
        fi
        exit 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
OUT=${1:-build/gpu-check-out}

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "gpu-check: no nvcc (set NVCC=)" >&2; exit 2; }
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
CC=${CC:-cc}
B=build/gpu-check
mkdir -p "$B"

WERR=
[ "$BUILD_ONLY" = 1 ] && WERR=-Werror
CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wshadow -Wno-unused-parameter \
 -fno-strict-aliasing -I. -I$CUDA_HOME/include -DKVSERVE_CUDA=1 $WERR"
NVFLAGS="-O2 -std=c++17 -arch=sm_90 -I. -Xcompiler -Wall,-Wno-unused-parameter"
[ "$BUILD_ONLY" = 1 ] && NVFLAGS="$NVFLAGS -Werror all-warnings -Xcompiler -Werror"

echo "gpu-check: building $B/gpu_check ($NVCC, $CC)"
JOBS=$(nproc 2>/dev/null || echo 2)
[ "$JOBS" -gt 8 ] && JOBS=8
OBJS=""
pids=""
n=0
for src in cuda/*.cu model/gguf.c model/model.c model/model_hparams.c model/dtype.c engine/forward.c engine/sampler.c \
           cli/device.c cache/*.c cpu/*.c model/gguf_write.c model/mkmodel.c model/mkmodel_vocab.c cuda/check/gpu_check.c; do
    obj="$B/$(echo "$src" | tr / _).o"
    OBJS="$OBJS $obj"
    # the CPU kernels of each SIMD level get that level's flags (as in the Makefile)
    case "$src" in
    *.cu) $NVCC $NVFLAGS -c -o "$obj" "$src" & ;;
    *_neon.c|*_dotprod.c) OBJS=${OBJS% "$obj"}; continue ;;
    *_avx2.c) $CC $CFLAGS -mavx2 -mfma -mf16c -c -o "$obj" "$src" & ;;
    *_avx512.c) $CC $CFLAGS -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd \
                    -c -o "$obj" "$src" & ;;
    *_vnni.c) $CC $CFLAGS -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd \
                  -mavx512vnni -c -o "$obj" "$src" & ;;
    *) $CC $CFLAGS -c -o "$obj" "$src" & ;;
    esac
    pids="$pids $!"
    n=$((n + 1))
    if [ "$n" -ge "$JOBS" ]; then
        for p in $pids; do wait "$p" || { echo "gpu-check: build failed" >&2; exit 2; }; done
        pids=""
        n=0
    fi
done
for p in $pids; do wait "$p" || { echo "gpu-check: build failed" >&2; exit 2; }; done
# shellcheck disable=SC2086
# cuBLAS is loaded at run time (cuda/cublas_dl.h): the RUNPATH lets it be found in this toolkit.
$CC -o "$B/gpu_check" $OBJS -L"$CUDA_HOME/lib64" -L"$CUDA_HOME/targets/x86_64-linux/lib" \
    -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart_static -ldl -lrt -lpthread -lm -lstdc++ \
    || { echo "gpu-check: link failed" >&2; exit 2; }
echo "gpu-check: built $B/gpu_check"
[ "$BUILD_ONLY" = 1 ] && exit 0

mkdir -p "$OUT"
MODEL=.gpu/stories260K.gguf
GOLDEN=.gpu/stories260K.golden.txt
[ -f "$MODEL" ] || echo "gpu-check: $MODEL missing (run --prepare on a machine with the models): golden check will fail"
set +e
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; fi
{ timeout 330 "$B/gpu_check" --model "$MODEL" --golden "$GOLDEN" --out "$OUT" $QUICK; echo $? > "$OUT/exit-status"; } 2>&1 \
    | tee "$OUT/gpu-check.log"
rc=$(cat "$OUT/exit-status" 2>/dev/null || echo 2)
[ "$rc" = 124 ] && echo "gpu-check: timed out after 330 s"
if [ "$SERVE" = 1 ]; then
    { scripts/gpu-serve.sh "$OUT"; echo $? > "$OUT/serve-status"; } 2>&1 | tee "$OUT/gpu-serve.log"
    [ "$rc" = 0 ] && [ "$(cat "$OUT/serve-status" 2>/dev/null || echo 2)" != 0 ] && rc=1
fi
exit "$rc"
