# kvserve — one non-recursive Makefile.
#   make            build build/kvserve (CUDA backend too when nvcc is found; CUDA=0 skips it)
#   make run        build and start the server on the default model
#   make test       build and run every Criterion test
#   make asan       the tests under AddressSanitizer + UBSan
#   make fuzz       the libFuzzer targets (clang)
#   make bench      benchmarks (numbers, never a gate)
#   make install    binary, systemd unit and config (PREFIX=/usr/local, DESTDIR=, SYSCONFDIR=/etc)
#   make deb        a Debian package (dpkg-deb) in $(BUILD)/
#   make test-arm64 the kernel and model tests cross-compiled for aarch64, run under qemu-user
#   V=1             show the commands

# `make` alone builds the binary, whatever rule comes first below.
.DEFAULT_GOAL := all

Q := $(if $(V),,@)
CC ?= cc
BUILD ?= build
WERROR ?= 1

# pkg-config runs when a recipe first needs its answer (after `deps` has installed the packages on
# a fresh machine), not while the Makefile is parsed; each answer is computed once.
PKGS := libmicrohttpd libcjson libuv libpcre2-8
PKG_CFLAGS = $(eval PKG_CFLAGS := $$(shell pkg-config --cflags $(PKGS) 2>/dev/null))$(PKG_CFLAGS)
PKG_LIBS = $(eval PKG_LIBS := $$(shell pkg-config --libs $(PKGS) 2>/dev/null))$(PKG_LIBS)

OPT ?= -O2
# Extra target flags for every file. Empty by default: the binary runs on any CPU of the target
# architecture and picks its SIMD level at run time (cpu/isa.c). E.g. ARCH=-march=native.
ARCH ?=
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g $(ARCH) -Wall -Wextra -Wshadow -Wno-unused-parameter \
               -fno-strict-aliasing -MMD -MP -I. $(PKG_CFLAGS) $(if $(filter 1,$(WERROR)),-Werror)
CFLAGS += $(OPT) $(CFLAGS_BASE)
LDLIBS = $(PKG_LIBS) -lm -lpthread

# --- CUDA -------------------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCC_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80
NVCCFLAGS ?= -O2 -std=c++17 $(NVCC_ARCH) -I. -Xcompiler -Wall,-Wno-unused-parameter \
             $(if $(filter 1,$(WERROR)),-Werror all-warnings -Xcompiler -Werror)
CUDA_SRCS := $(wildcard cuda/*.cu)
# cuBLAS is not linked: the CUDA backend dlopens it when it is first created (cuda/cublas_dl.h),
# so a run on the CPU never maps it. The RUNPATH names the build's toolkit library directory for
# that dlopen (LD_LIBRARY_PATH still comes first). The loader's C test sees the toolkit's headers
# for cuBLAS's types.
ifeq ($(CUDA),1)
CFLAGS += -DKVSERVE_CUDA=1
$(BUILD)/tests/test_cublas_dl.o: CFLAGS += -isystem $(CUDA_HOME)/include
CUDA_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -Wl,-rpath,$(CUDA_HOME)/lib64 \
             -lcudart_static -ldl -lrt -lstdc++
else
# Without the backend, its entry points say why (cuda/absent.c).
CUDA_OBJS := $(BUILD)/cuda/absent.o
CUDA_LIBS :=
endif

# --- version ------------------------------------------------------------------
# `kvserve --version`: the release (the file VERSION) and the commit: git's short hash in a
# checkout ("-dirty" with uncommitted changes); in a tree made by `git archive` (a release tarball),
# the hash git wrote into .git_archival.txt (export-subst, .gitattributes); "unknown" otherwise.
# Git is asked only when this tree is a checkout itself (.git here), never a repository around an
# unpacked tarball. Packagers may set KVSERVE_COMMIT. Only base/version.c sees the two, and it is
# rebuilt when the commit changes ($(BUILD)/commit.txt is rewritten only then).
KVSERVE_VERSION := $(or $(strip $(shell cat VERSION 2>/dev/null)),0.0.0)
GIT_COMMIT = $(eval GIT_COMMIT := $$(shell if [ -e .git ]; then \
                 { git rev-parse --short=12 HEAD && { git diff --quiet HEAD -- || echo -dirty; }; } 2>/dev/null; \
             else sed -n 's/^node: \([0-9a-f]\{12\}\)[0-9a-f]*$$$$/\1/p' .git_archival.txt 2>/dev/null; fi \
             | tr -d '\n'))$(GIT_COMMIT)
KVSERVE_COMMIT ?= $(or $(GIT_COMMIT),unknown)
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(dir $@)
	@c='$(KVSERVE_COMMIT)'; [ "$$(cat $@ 2>/dev/null)" = "$$c" ] || echo "$$c" > $@
$(BUILD)/base/version.o: $(BUILD)/commit.txt
$(BUILD)/base/version.o: CFLAGS += -DKVSERVE_VERSION='"$(KVSERVE_VERSION)"' -DKVSERVE_COMMIT='"$(KVSERVE_COMMIT)"'
# What --version will say, for scripts (scripts/mkdeb.sh) and tests: "VERSION COMMIT".
print-version:
	@echo '$(KVSERVE_VERSION) $(KVSERVE_COMMIT)'
.PHONY: FORCE print-version
FORCE:

# --- CPU kernels per SIMD level ---------------------------------------------
# A file of cpu/ named after a level gets that level's target flags and runs only when the CPU
# has it (cpu/internal.h); every other file is built for the baseline target.
ISA_AVX2 := -mavx2 -mfma -mf16c
ISA_AVX512 := $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd
ISA_VNNI := $(ISA_AVX512) -mavx512vnni
ISA_DOTPROD := -march=armv8.2-a+dotprod
isa_flags = $(if $(filter %_avx2.c,$1),$(ISA_AVX2),$(if $(filter %_avx512.c,$1),$(ISA_AVX512),$(if \
            $(filter %_vnni.c,$1),$(ISA_VNNI),$(if $(filter %_dotprod.c,$1),$(ISA_DOTPROD)))))
# On a fresh machine the compiler may not be installed yet while the Makefile is parsed (deps
# installs it): the host's architecture then.
TARGET_MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null || uname -m)
ifneq ($(filter x86_64%,$(TARGET_MACHINE)),)
CPU_SKIP := %_neon.c %_dotprod.c
else ifneq ($(filter aarch64%,$(TARGET_MACHINE)),)
CPU_SKIP := %_avx2.c %_avx512.c %_vnni.c
else
CPU_SKIP := %_avx2.c %_avx512.c %_vnni.c %_neon.c %_dotprod.c
endif

# --- sources ----------------------------------------------------------------
LIB_SRCS := $(filter-out $(CPU_SKIP),$(wildcard base/*.c jinja/*.c model/*.c grammar/*.c cache/*.c engine/*.c \
                cpu/*.c server/*.c server/*/*.c)) \
            $(filter-out cli/main.c,$(wildcard cli/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
# tests/ref_*.c, tests/*_harness.c: shared test helpers (the float64 reference forward pass, a
# server child process and its clients).
TEST_SRCS := $(wildcard tests/test_*.c tests/ref_*.c tests/*_harness.c)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
# Stand-alone benchmark programs: bench/NAME.c -> $(BUILD)/bench/NAME (linked with the library).
BENCH_PROGS := $(patsubst %.c,$(BUILD)/%,$(wildcard bench/*.c))

.PHONY: install deb gpu-check-build bench-progs all deps run test test-cuda test-arm64 asan fuzz bench clean gpu-check
all: deps $(BUILD)/kvserve

deps:
	$(Q)scripts/deps.sh

$(BUILD)/libkvserve.a: $(LIB_OBJS) $(CUDA_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/kvserve: $(BUILD)/cli/main.o $(BUILD)/libkvserve.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

# Order-only: the packages are installed (scripts/deps.sh) before the first compile, also with -j.
$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(call isa_flags,$<) -c -o $@ $<

$(BUILD)/%.o: %.cu | deps
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/test_kvserve: $(TEST_OBJS) $(BUILD)/libkvserve.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcriterion -lcurl $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libkvserve.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)

bench-progs: $(BENCH_PROGS)

# The CUDA attention kernels and K/V store under a CPU emulation of the CUDA built-ins
# (cuda/check/attn_emu.cc): built with the C++ compiler alone, no CUDA toolkit needed.
$(BUILD)/attn_emu: cuda/check/attn_emu.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
	    $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP -I. -o $@ $< -lpthread

# The CUDA kernels of the quantised weight types under the same emulation (cuda/check/quant_emu.cc).
$(BUILD)/quant_emu: cuda/check/quant_emu.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
	    $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP -I. -o $@ $< -lpthread

# The kernels of the other op families (norms, RoPE, element-wise, gathers, argmax, conversions,
# the K/V store with RoPE) under the same emulation (cuda/check/ops_emu.cc).
$(BUILD)/ops_emu: cuda/check/ops_emu.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
	    $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP -I. -o $@ $< -lpthread

# A stat() that stalls on demand, preloaded into a server by the tests (tests/stall_stat.c).
$(BUILD)/tests/libstall_stat.so: tests/stall_stat.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) -std=c11 -O2 -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror) -shared -fPIC -o $@ $< -ldl

# The device sampler under the same emulation, against the CPU's sampler (engine/sampler.c, linked
# in) on the same rows (cuda/check/sample_emu.cc).
$(BUILD)/sample_emu: cuda/check/sample_emu.cc $(BUILD)/engine/sampler.o
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
	    $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP -I. -o $@ $< $(BUILD)/engine/sampler.o -lpthread -lm

# The dense decode kernels (matrix-vector, the fused QKV epilogue) and the bf16 instantiations of
# the other families under the same emulation (cuda/check/dense_emu.cc).
$(BUILD)/dense_emu: cuda/check/dense_emu.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
	    $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP -I. -o $@ $< -lpthread

# The mixture-of-experts and latent-attention kernels under the same emulation (cuda/check/moe_emu.cc).
$(BUILD)/moe_emu: cuda/check/moe_emu.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++17 -O2 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unused-function \
	    $(if $(filter 1,$(WERROR)),-Werror) -MMD -MP -I. -o $@ $< -lpthread

# The test binary finds the kvserve binary (for CLI and HTTP tests), the kernel emulation, the
# repository's test data (tests/data) and the optional reference sets in ../shared through these.
TEST_ENV := KVSERVE_BIN=$(abspath $(BUILD)/kvserve) KVSERVE_ATTN_EMU=$(abspath $(BUILD)/attn_emu) \
            KVSERVE_QUANT_EMU=$(abspath $(BUILD)/quant_emu) KVSERVE_OPS_EMU=$(abspath $(BUILD)/ops_emu) \
            KVSERVE_SAMPLE_EMU=$(abspath $(BUILD)/sample_emu) KVSERVE_DENSE_EMU=$(abspath $(BUILD)/dense_emu) \
            KVSERVE_MOE_EMU=$(abspath $(BUILD)/moe_emu) \
            KVSERVE_DATA=$(abspath tests/data) KVSERVE_SHARED=$(abspath ../shared) \
            KVSERVE_STALL_SO=$(abspath $(BUILD)/tests/libstall_stat.so)
test: all $(BUILD)/test_kvserve $(BUILD)/attn_emu $(BUILD)/quant_emu $(BUILD)/ops_emu $(BUILD)/sample_emu $(BUILD)/dense_emu \
      $(BUILD)/moe_emu $(BUILD)/tests/libstall_stat.so
	$(Q)$(TEST_ENV) $(BUILD)/test_kvserve --jobs 2 $(TEST_ARGS)

test-cuda: all $(BUILD)/test_kvserve
	$(Q)$(TEST_ENV) KVSERVE_TEST_CUDA=1 $(BUILD)/test_kvserve --filter 'cuda*/*' $(TEST_ARGS)

asan: deps
	$(Q)$(MAKE) BUILD=build/asan OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer" \
	    CUDA=0 build/asan/kvserve build/asan/test_kvserve
	$(Q)ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
	    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    KVSERVE_BIN=$(abspath build/asan/kvserve) KVSERVE_DATA=$(abspath tests/data) \
	    KVSERVE_SHARED=$(abspath ../shared) \
	    build/asan/test_kvserve --jobs 2 $(TEST_ARGS)

# --- aarch64 under qemu-user -------------------------------------------------
# The kernel and model tests (and the library below them, NEON kernels included) cross-compiled
# with Debian's aarch64 gcc and run by the real Criterion runner under qemu-user; the runner's
# arm64 libraries are unpacked into a sysroot by scripts/deps.sh --arm64. qemu's default CPU has
# dotprod, so both the neon and neon+dotprod kernels run. Fails, never skips, when it cannot run.
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_BUILD ?= build/arm64
ARM64_SYSROOT := $(abspath $(ARM64_BUILD))/sysroot
QEMU_AARCH64 ?= qemu-aarch64
ARM64_TESTS := tests/test_cpu.c tests/test_cpu_attn.c tests/test_cpu_isa.c tests/test_cpu_quant.c \
               tests/test_forward.c tests/test_golden.c tests/test_dtype.c tests/test_model.c \
               tests/test_gguf.c tests/test_kv.c tests/ref_forward.c tests/test_util.c tests/arm64/qemu_exec.c
ARM64_LIB_SRCS := $(filter-out %_avx2.c %_avx512.c %_vnni.c,$(wildcard base/*.c jinja/*.c model/*.c grammar/*.c \
                  cache/*.c engine/*.c cpu/*.c)) cli/device.c cuda/absent.c
# Debian 12's arm64 packages put their libraries in both lib/ and usr/lib/ of the sysroot (the
# sysroot is not usr-merged: zlib1g, libkeyutils1 and libcom-err2 land in lib/): the link must see
# both, or Criterion's libgit2 and libkrb5 have undefined references.
ARM64_LIBDIRS := $(ARM64_SYSROOT)/usr/lib/aarch64-linux-gnu $(ARM64_SYSROOT)/lib/aarch64-linux-gnu
# golden/cli_generate runs the kvserve binary, which this build does not make. (Criterion's
# filters are extglobs: @(a|b), not braces.)
ARM64_FILTER ?= --filter '@(@(cpu|cpu_attn|cpu_isa|cpu_quant|forward|dtype|model|gguf|kv)/*|golden/@(greedy_cases|logits_probe))'
$(BUILD)/libkvserve-arm64.a: $(ARM64_LIB_SRCS:%.c=$(BUILD)/%.o)
	$(Q)rm -f $@ && ar rcs $@ $^
$(BUILD)/test_arm64: $(ARM64_TESTS:%.c=$(BUILD)/%.o) $(BUILD)/libkvserve-arm64.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(foreach d,$(ARM64_LIBDIRS),-L$(d) -Wl,-rpath-link,$(d)) \
	    -l:libcriterion.so.3 -l:libcjson.so.1 -l:libpcre2-8.so.0 -lm -lpthread
# A run in which no test ran (a filter that matches nothing) fails like a failing test.
test-arm64:
	$(Q)scripts/deps.sh --arm64 $(ARM64_SYSROOT)
	$(Q)$(MAKE) --no-print-directory BUILD=$(ARM64_BUILD) CC=$(ARM64_CC) CUDA=0 $(ARM64_BUILD)/test_arm64
	$(Q){ QEMU_LD_PREFIX=$(ARM64_SYSROOT) KVSERVE_QEMU=$$(command -v $(QEMU_AARCH64)) \
	    KVSERVE_DATA=$(abspath tests/data) KVSERVE_SHARED=$(abspath ../shared) \
	    $(QEMU_AARCH64) $(ARM64_BUILD)/test_arm64 --jobs 2 $(ARM64_FILTER) $(TEST_ARGS); \
	    echo $$? > $(ARM64_BUILD)/test.rc; } 2>&1 | tee $(ARM64_BUILD)/test.log
	$(Q)[ "$$(cat $(ARM64_BUILD)/test.rc)" = 0 ] && grep -q 'Tested: [1-9]' $(ARM64_BUILD)/test.log || \
	    { echo "test-arm64: FAILED (exit status $$(cat $(ARM64_BUILD)/test.rc), or no test ran)" >&2; exit 1; }

FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -I. $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined -ffunction-sections -fdata-sections -Wl,--gc-sections
FUZZ_LIB_SRCS := $(filter-out server/server.c server/http/http.c server/gen.c cli/cmd_serve.c,$(LIB_SRCS))
FUZZ_OBJS := $(FUZZ_LIB_SRCS:%.c=$(BUILD)/fuzz/obj/%.o)
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(Q)clang $(FUZZ_CFLAGS) $(call isa_flags,$<) -c -o $@ $<
# An archive, so that each target links only the objects it needs.
$(BUILD)/fuzz/libfuzz.a: $(FUZZ_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
fuzz: deps $(BUILD)/fuzz/libfuzz.a
	$(Q)for f in $(FUZZ_SRCS); do n=$$(basename $$f .c); echo "  FUZZ    $$n"; \
	    clang $(FUZZ_CFLAGS) -o $(BUILD)/fuzz/$$n $$f $(BUILD)/fuzz/libfuzz.a $(LDLIBS) || exit 1; done

# The default model is the repository's own stories260K (tests/data, MIT: see tests/data/README.md).
MODEL ?= tests/data/stories260K.gguf
run: all $(MODEL)
	$(Q)scripts/run.sh $(BUILD)/kvserve $(MODEL) $(RUN_ARGS)

# --- install ------------------------------------------------------------------------------
# The unit's paths follow PREFIX and SYSCONFDIR; KVSERVE_UNIT_USER=NAME runs it as that static
# user instead of a DynamicUser (the Debian package's kvserve user). An existing config file is
# kept.
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
KVSERVE_UNIT_USER ?=
install: all
	$(Q)install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/kvserve
	$(Q)install -m 0755 $(BUILD)/kvserve $(DESTDIR)$(PREFIX)/bin/kvserve
	$(Q)sed -e 's|/usr/local/bin/kvserve|$(PREFIX)/bin/kvserve|g' -e 's|/etc/kvserve/|$(SYSCONFDIR)/kvserve/|g' \
	    $(if $(KVSERVE_UNIT_USER),-e 's|^DynamicUser=yes|User=$(KVSERVE_UNIT_USER)\nGroup=$(KVSERVE_UNIT_USER)|') \
	    config/kvserve.service >$(DESTDIR)$(UNITDIR)/kvserve.service
	$(Q)chmod 0644 $(DESTDIR)$(UNITDIR)/kvserve.service
	$(Q)if [ -e $(DESTDIR)$(SYSCONFDIR)/kvserve/kvserve.conf ]; then \
	    echo "install: keeping $(DESTDIR)$(SYSCONFDIR)/kvserve/kvserve.conf"; \
	else install -m 0644 config/kvserve.conf $(DESTDIR)$(SYSCONFDIR)/kvserve/kvserve.conf; fi
	@echo "installed $(DESTDIR)$(PREFIX)/bin/kvserve, $(DESTDIR)$(UNITDIR)/kvserve.service, $(DESTDIR)$(SYSCONFDIR)/kvserve/kvserve.conf"

deb: all
	$(Q)scripts/mkdeb.sh $(abspath $(BUILD)) $(abspath $(BUILD))

bench: all bench-progs
	$(Q)scripts/bench.sh $(BUILD)/kvserve

# The self-contained GPU check program (scripts/gpu-check.sh); CI builds it whenever nvcc exists.
gpu-check:
	$(Q)scripts/gpu-check.sh $(BUILD)/gpu-check-out
gpu-check-build:
	$(Q)if [ "$(CUDA)" = 1 ]; then scripts/gpu-check.sh --build-only; else echo "gpu-check: CUDA=0, not built"; fi

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name sysroot -prune -o -name '*.d' -type f -print 2>/dev/null)
