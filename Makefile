# dtrun — build, test, quickstart, install.
#
#   make                 bin/dtrun (CPU backend; CUDA too when nvcc + NCCL are found)
#   make CUDA=0          never build the CUDA backend
#   make deps            install the Debian packages the build and tests need
#   make test            every test; ends with "N passed, N failed"
#   make test-full       + the whole layout-equivalence matrix
#   make test-gpu        CUDA kernels against their CPU twins (skips without a GPU)
#   make quickstart      build, train configs/quickstart.yaml on 2 workers, plot runs/quickstart.svg
#   make fuzz            every libFuzzer target, 10^6 runs each
#   make install PREFIX=/usr/local

PREFIX   ?= /usr/local
CC       ?= gcc
ARCH     ?= -march=native
OPT      ?= -O2
BUILD    ?= build
SAN      ?= 0
# parallel inner builds of test, test-full and quickstart: one job per core
JOBS     ?= -j$(shell nproc 2>/dev/null || echo 2)

PKGS     := yaml-0.1 libuv openblas zlib libxxhash libcjson libpng libpcre2-8 libutf8proc
ifeq ($(DEPS_PREFIX),)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
else
# A prepared folder of headers and shared libraries instead of the Debian
# packages, for machines without them (scripts/device-check.sh --prepare makes
# one: include/ and lib/); the rpath lets the binaries find the libraries
# where they are, with no LD_LIBRARY_PATH. An old-style DT_RPATH
# (--disable-new-dtags), because DT_RUNPATH would not serve the libraries'
# own dependencies (libopenblas needs libgfortran, also in that folder).
DEPS_ABS   := $(abspath $(DEPS_PREFIX))
PKG_CFLAGS := -I$(DEPS_ABS)/include
PKG_LIBS   := -L$(DEPS_ABS)/lib -Wl,--disable-new-dtags,-rpath,$(DEPS_ABS)/lib -lyaml -luv -lpthread -ldl -lrt \
              -lopenblas -lz -lxxhash -lcjson -lpng16 -lpcre2-8 -lutf8proc
endif

CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) -g $(ARCH) -fopenmp -Wall -Wextra -Wshadow \
            -Wno-unused-parameter -I. $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := $(PKG_LIBS) -fopenmp -lm
ifeq ($(SAN),1)
  BUILD  := build-san
  CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDLIBS += -fsanitize=address,undefined
endif

# ---- CUDA backend: only when nvcc and NCCL are present and CUDA != 0 ----
# kernels/cuda/*.cu (and runtime/comm/*.cu) go into libdtrun.a and DTRUN_CUDA
# is defined for the C files. Warnings are errors, nvcc's and the host
# compiler's alike. The sanitizer build (SAN=1) stays CPU-only: ASan's shadow
# memory and the CUDA driver's address-space reservations do not mix
# (cudaMalloc fails unless ASAN_OPTIONS=protect_shadow_gap=0), and the
# sanitized unit tests never reach a GPU anyway; it also halves nvcc time in CI.
# NCCL_HOME: where include/nccl.h and lib/libnccl.so live when not in the
# toolkit (pip's nvidia-nccl, a shim folder made by scripts/device-check.sh);
# its include/ and lib/ are searched first, for cuBLAS too.
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA      ?= $(shell test -x $(NVCC) && test -f $(NCCL_HOME)/include/nccl.h && echo 1 || echo 0)
CU_SRC    := $(wildcard kernels/cuda/*.cu runtime/comm/*.cu)
CUDA_BUILD := $(if $(filter 1,$(SAN)),0,$(CUDA))
ifeq ($(CUDA_BUILD),1)
ifneq ($(CU_SRC),)
  CUDA_INC := $(if $(filter $(CUDA_HOME),$(NCCL_HOME)),,-I$(NCCL_HOME)/include) -I$(CUDA_HOME)/include
  CUDA_LIB := $(if $(filter $(CUDA_HOME),$(NCCL_HOME)),,-L$(NCCL_HOME)/lib -Wl,-rpath,$(abspath $(NCCL_HOME))/lib) \
              -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
  CFLAGS  += -DDTRUN_CUDA $(CUDA_INC)
  # cuBLAS/cuBLASLt are NOT linked: kernels/cuda/blas.cu dlopen's them when
  # the backend finds a GPU (linking them costs every dtrun process ~0.6 s and
  # ~210 MB at start-up, launcher and CLI included); the rpath still points
  # dlopen at the toolkit. Nor is NCCL (218 MB): runtime/comm/comm_nccl_lib.c
  # dlopen's it when a communicator wants it, so the binary also starts where
  # libnccl is missing and runs there on the CPU transport; nccl.h is needed
  # at build time only. -lstdc++: nvcc's host code is C++.
  LDLIBS  += $(CUDA_LIB) -lcudart -ldl -lstdc++
  NVFLAGS := -O3 -std=c++17 -I. $(CUDA_INC) -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror \
             -Werror all-warnings --generate-code arch=compute_90,code=[sm_90,compute_90] \
             $(EXTRA_NVFLAGS)
  CU_OBJ  := $(CU_SRC:%.cu=$(BUILD)/%.o)
  CUDA_ON := 1
endif
endif

LIB_SRC  := $(wildcard lib/*.c lib/*/*.c) $(wildcard runtime/*.c runtime/*/*.c) $(wildcard kernels/*.c kernels/cpu/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CMD_SRC  := $(wildcard cmd/*.c)
TEST_SRC := $(wildcard test/unit/test_*.c)
TEST_BIN := $(TEST_SRC:test/unit/%.c=$(BUILD)/test/%)

.PHONY: all deps test test-full test-gpu gpu-tests-bin gpu-bench-bin quickstart install clean fuzz tests-bin
all: bin/dtrun

$(BUILD)/libdtrun.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The commit dtrun is built from (lib/util/build_info.h): the stamp is
# rewritten only when it changes, so an unchanged tree rebuilds nothing.
$(BUILD)/gen/commit.txt: FORCE
	@mkdir -p $(@D)
	@c=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	 [ "$$c" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null && c=$$c-dirty; \
	 echo "$$c" >$@.tmp; \
	 if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/lib/util/build_info.o: $(BUILD)/gen/commit.txt
$(BUILD)/lib/util/build_info.o: CFLAGS += -DDTRUN_GIT_COMMIT='"$(shell cat $(BUILD)/gen/commit.txt 2>/dev/null)"'
.PHONY: FORCE
FORCE:

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

ifeq ($(SAN),1)
bin/dtrun-san: $(BUILD)/cmd/dtrun.o $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(LDLIBS)
else
bin/dtrun: $(CMD_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $^ -o $@ $(LDLIBS)
endif

$(BUILD)/test/%: test/unit/%.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)

tests-bin: $(TEST_BIN)

# GPT-2's vocabulary and merges are assembled into this object (.incbin), which
# the compiler's dependency files do not see.
$(BUILD)/lib/text/gpt2_data.o: lib/text/gpt2/encoder.json lib/text/gpt2/vocab.bpe

deps:
	@scripts/deps.sh

# make test: deps, the normal build, the sanitizer build of the unit tests, then
# every unit and integration test. The last line is "N passed, N failed".
# The GPU tests and benchmarks are built too (not run): a machine without a
# GPU still keeps them compiling for the one that has one.
test: deps
	@$(MAKE) --no-print-directory $(JOBS) all tests-bin gpu-tests-bin gpu-bench-bin
	@$(MAKE) --no-print-directory $(JOBS) SAN=1 tests-bin bin/dtrun-san
	@test/run.sh

test-full: deps
	@$(MAKE) --no-print-directory $(JOBS) all tests-bin
	@DTRUN_TEST_FULL=1 test/run.sh

# make test-gpu: the CUDA ops against their CPU twins and 50-step GPT and ViT (fp32, bf16)
# runs on the CUDA backend (test/gpu/run.sh; one line and success without a
# GPU). With DEPS_PREFIX (a bare GPU machine, scripts/device-check.sh) the
# Debian packages are not looked for.
GPU_TEST_SRC := $(wildcard test/gpu/*.c)
GPU_TEST_BIN := $(GPU_TEST_SRC:test/gpu/%.c=$(BUILD)/test-gpu/%)
$(BUILD)/test-gpu/%: test/gpu/%.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)

gpu-tests-bin: $(GPU_TEST_BIN)

# scripts/bench/gpu.sh's dtrun side: GPT training steps on the CUDA backend.
$(BUILD)/bench/gpu_train: scripts/bench/gpu_train.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)

# scripts/bench/comm.sh's dtrun side (and, with --device, NCCL on a GPU box):
# linked like every binary, since the comm layer pulls in the CUDA objects of
# a CUDA build.
$(BUILD)/bench/comm_bench: scripts/bench/comm_bench.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)

# scripts/bench/bf16-gemm.sh: fp32 sgemm vs bf16 (convert-then-sgemm, sbgemm).
$(BUILD)/bench/bf16_gemm: scripts/bench/bf16_gemm.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)

# scripts/bench/attention-train.sh: the attention core, fused against naive.
$(BUILD)/bench/attention_bench: scripts/bench/attention_bench.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)

gpu-bench-bin: $(BUILD)/bench/gpu_train $(BUILD)/bench/comm_bench

# scripts/bench/gpu_attention.c: the blockwise attention kernels alone, fp32 and
# bf16, at GPT-2 124M's shapes (one JSON line); part of gpu-bench-bin in a CUDA
# build only, since it times the CUDA table.
$(BUILD)/bench/gpu_attention: scripts/bench/gpu_attention.c $(BUILD)/libdtrun.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< $(BUILD)/libdtrun.a -o $@ $(LDLIBS)
ifeq ($(CUDA_ON),1)
gpu-bench-bin: $(BUILD)/bench/gpu_attention
endif

test-gpu:
	@$(if $(DEPS_PREFIX),true,scripts/deps.sh)
	@BUILD=$(BUILD) CUDA_ON=$(CUDA_ON) MAKE="$(MAKE)" test/gpu/run.sh

quickstart: deps
	@$(MAKE) --no-print-directory $(JOBS) all
	@scripts/data/text-corpus.sh data/fortunes.txt
	bin/dtrun --nproc-per-node=2 configs/quickstart.yaml
	@printf 'curves: '; bin/dtrun plot runs/quickstart.jsonl -o runs/quickstart.svg
	@printf 'the model writes: '; bin/dtrun generate runs/quickstart-ckpt --prompt 'The ' --max-new-tokens 120 \
	  --temperature 0.8 --top-k 20 --seed 1 2>/dev/null; echo

# libFuzzer targets (clang): make fuzz RUNS=1000000
fuzz:
	@for t in jobspec rdzv hostlist safetensors; do scripts/fuzz.sh $$t $(or $(RUNS),1000000) || exit 1; done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
	           $(DESTDIR)$(PREFIX)/share/dtrun/configs
	install -m 755 bin/dtrun $(DESTDIR)$(PREFIX)/bin/dtrun
	install -m 644 man/dtrun.1 $(DESTDIR)$(PREFIX)/share/man/man1/dtrun.1
	install -m 644 man/dtrun-job.5 $(DESTDIR)$(PREFIX)/share/man/man5/dtrun-job.5
	cp -r configs/. $(DESTDIR)$(PREFIX)/share/dtrun/configs/

clean:
	rm -rf build build-san build-fuzz bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
