# dtrun — build, test, quickstart, install.
#
#   make                 bin/dtrun (CPU backend; CUDA too when nvcc + NCCL are found)
#   make CUDA=0          never build the CUDA backend
#   make deps            install the Debian packages the build and tests need
#   make test            every test; ends with "N passed, N failed"
#   make test-full       + the whole layout-equivalence matrix
#   make test-gpu        CUDA kernels against their CPU twins (skips without a GPU)
#   make quickstart      build, then train configs/quickstart.yaml
#   make install PREFIX=/usr/local

PREFIX   ?= /usr/local
CC       ?= gcc
ARCH     ?= -march=native
OPT      ?= -O2
BUILD    ?= build
SAN      ?= 0

PKGS     := yaml-0.1 libuv openblas zlib libxxhash libcjson
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) -g $(ARCH) -fopenmp -Wall -Wextra -Wshadow \
            -Wno-unused-parameter -I. $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := $(PKG_LIBS) -fopenmp -lm
ifeq ($(SAN),1)
  BUILD  := build-san
  CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDLIBS += -fsanitize=address,undefined
endif

# ---- CUDA backend: only when nvcc and NCCL are present and CUDA != 0 ----
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA      ?= $(shell test -x $(NVCC) && test -f $(CUDA_HOME)/include/nccl.h && echo 1 || echo 0)
CU_SRC    := $(wildcard kernels/cuda/*.cu runtime/comm/*.cu)
ifeq ($(CUDA),1)
ifneq ($(CU_SRC),)
  CFLAGS  += -DDTRUN_CUDA -I$(CUDA_HOME)/include
  LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart
  NVFLAGS := -O3 -std=c++17 -I. -Xcompiler -Wall,-Wextra,-Wno-unused-parameter -Werror all-warnings \
             --generate-code arch=compute_90,code=[sm_90,compute_90] $(EXTRA_NVFLAGS)
  CU_OBJ  := $(CU_SRC:%.cu=$(BUILD)/%.o)
endif
endif

LIB_SRC  := $(wildcard lib/*.c) $(wildcard runtime/*.c runtime/*/*.c) $(wildcard kernels/*.c kernels/cpu/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CMD_SRC  := $(wildcard cmd/*.c)
TEST_SRC := $(wildcard test/unit/test_*.c)
TEST_BIN := $(TEST_SRC:test/unit/%.c=$(BUILD)/test/%)

.PHONY: all deps test test-full test-gpu quickstart install clean fuzz tests-bin
all: bin/dtrun

$(BUILD)/libdtrun.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

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

deps:
	@scripts/deps.sh

# make test: deps, the normal build, the sanitizer build of the unit tests, then
# every unit and integration test. The last line is "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory all tests-bin
	@$(MAKE) --no-print-directory SAN=1 tests-bin bin/dtrun-san
	@test/run.sh

test-full: deps
	@$(MAKE) --no-print-directory all tests-bin
	@DTRUN_TEST_FULL=1 test/run.sh

test-gpu: deps
	@$(MAKE) --no-print-directory all
	@test/gpu/run.sh

quickstart: deps
	@$(MAKE) --no-print-directory all
	bin/dtrun --nproc-per-node=1 configs/quickstart.yaml

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
