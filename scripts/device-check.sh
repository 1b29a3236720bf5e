#!/usr/bin/env bash
# device-check.sh — build dtrun and run the GPU checks on a bare single-GPU
# machine that has nvcc and a driver but no package registry (and maybe none of
# libyaml, libuv, OpenBLAS, cJSON, xxhash, zlib, Random123).
#
# Two steps:
#  1. HERE (a machine with the Debian packages: `make deps`):
#         scripts/device-check.sh --prepare
#     copies the headers and shared libraries the build needs into
#     build/device-deps/ (ignored by git, inside build/; ~40 MB, most of it
#     libopenblas), and llm.c's source for the benchmark's llm.c row into
#     build/device-deps/llm.c/ (optional, see LLMC_SRC below), and checks that
#     it and the working tree stay under the device tool's 64 MiB.
#     LLMC_SRC: a checkout of karpathy/llm.c, or a bare git directory of it
#     (default: the first of ../llm.c, ~/llm.c and /work/.mirror/karpathy+llm.c/repo,
#     where this workplace's fetch tool leaves a snapshot, that exists). Only
#     train_gpt2.cu, llmc/ and LICENSE (MIT) are copied, with the commit in
#     llm.c/COMMIT; nothing of llm.c is committed to this repository. Without
#     it the llm.c row says why it is missing.
#  2. ON THE GPU MACHINE, with that folder carried along (the device tool:
#     run(command="scripts/device-check.sh", carry=["build/device-deps"])):
#         scripts/device-check.sh [--tests|--bench]
#     says what the machine has (GPU, driver, nvcc, NCCL, cuBLAS, PyTorch),
#     builds with DEPS_PREFIX=build/device-deps (NCCL and cuBLAS from the CUDA
#     toolkit, or else from PyTorch's nvidia-* pip packages through a shim
#     folder), then runs `make test-gpu` (--tests: the CUDA ops against
#     their CPU twins, NCCL, and test/gpu/share_gpu.sh: dp2, tp2 and pp2 runs
#     of two ranks on the one GPU over the CPU transport against one process)
#     and scripts/bench/gpu.sh (--bench: dtrun, PyTorch and llm.c side by
#     side, with the dry-run's memory against the driver's); both by default.
#     BUDGET_S (default 570): the seconds the whole command may take, so that
#     it ends inside the device tool's 10 minutes; the bench skips the rows
#     that would start too late (each says so). Logs and a summary go to $OUT
#     when it is set (the device tool brings $OUT back, at most 8 files: this
#     writes 7), else to build/device-check/.
# Exit status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
deps=${DEPS_DIR:-build/device-deps}
limit=$((63 * 1024 * 1024)) # the tool's 64 MiB for the tree and the carried folder, less a margin

# ------------------------------------------------------------------ prepare
prepare() {
  local multi=/usr/lib/x86_64-linux-gnu ob=/usr/lib/x86_64-linux-gnu/openblas-pthread
  local obinc=/usr/include/x86_64-linux-gnu/openblas-pthread
  rm -rf "$deps"
  mkdir -p "$deps/include" "$deps/lib"
  local missing=()
  cpy() { # src dst-dir; links followed (png.h is a link into libpng16/, which is not copied)
    if [ -e "$1" ]; then cp -aL "$1" "$2/"; else missing+=("$1"); fi
  }
  # headers the C sources include (<yaml.h>, <uv.h>, <cblas.h>, <zlib.h>,
  # <xxhash.h>, <cJSON.h>, <Random123/philox.h>, <png.h>, <pcre2.h>, <utf8proc.h>)
  for h in /usr/include/yaml.h /usr/include/uv.h /usr/include/uv /usr/include/zlib.h \
           /usr/include/zconf.h /usr/include/xxhash.h /usr/include/xxh3.h /usr/include/cjson/cJSON.h \
           /usr/include/Random123 /usr/include/png.h /usr/include/pngconf.h /usr/include/pnglibconf.h /usr/include/pcre2.h /usr/include/utf8proc.h "$obinc/cblas.h" "$obinc/openblas_config.h" "$obinc/f77blas.h"; do
    cpy "$h" "$deps/include"
  done
  # shared libraries by soname, plus the unversioned name the linker wants;
  # libopenblas needs libgfortran and libquadmath at run time
  lib() { # linker-name soname-path
    local real; real=$(readlink -f "$2" 2>/dev/null) || true
    if [ -z "$real" ] || [ ! -f "$real" ]; then missing+=("$2"); return; fi
    cp "$real" "$deps/lib/$(basename "$2")"
    [ -n "$1" ] && ln -sf "$(basename "$2")" "$deps/lib/$1"
  }
  lib libyaml.so "$multi/libyaml-0.so.2"
  lib libuv.so "$multi/libuv.so.1"
  lib libopenblas.so "$ob/libopenblas.so.0"
  lib libz.so "$multi/libz.so.1"
  lib libxxhash.so "$multi/libxxhash.so.0"
  lib libcjson.so "$multi/libcjson.so.1"
  lib libpng16.so "$multi/libpng16.so.16"
  lib libpcre2-8.so "$multi/libpcre2-8.so.0"
  lib libutf8proc.so "$multi/libutf8proc.so.2"
  lib "" "$multi/libgfortran.so.5"
  lib "" "$multi/libquadmath.so.0"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "device-check: --prepare: missing here: ${missing[*]} (run make deps first)" >&2
    return 1
  fi
  local llmc_note
  if llmc_note=$(prepare_llmc "$deps/llm.c"); then echo "device-check: $llmc_note"
  else echo "device-check: --prepare: llm.c not copied: $llmc_note (the benchmark's llm.c row will say so)" >&2; fi
  # what travels: the carried folder, the tracked files, the untracked ones git does not ignore
  local bytes tree
  bytes=$(du -sbL "$deps" | cut -f1)
  tree=$(git ls-files -z --cached --others --exclude-standard 2>/dev/null | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  bytes=$((bytes + ${tree:-0}))
  {
    echo "prepared $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
    echo "needs glibc >= that version on the GPU machine"
    (cd "$deps" && find . -type f -o -type l | sort)
  } >"$deps/MANIFEST"
  if [ "$bytes" -gt "$limit" ]; then
    echo "device-check: --prepare: $deps and the working tree are $((bytes / 1048576)) MiB, over the $((limit / 1048576)) MiB the device tool carries" >&2
    return 1
  fi
  echo "device-check: prepared $deps ($((bytes / 1048576)) MiB with the working tree, of $((limit / 1048576))); on the GPU machine run:"
  echo "  scripts/device-check.sh   (device tool: carry [\"$deps\"])"
}

# llm.c's source (train_gpt2.cu, llmc/, LICENSE) into $1 from LLMC_SRC: one
# line on stdout saying what was copied (0), or why not (1)
prepare_llmc() {
  local dst=$1 src=${LLMC_SRC:-} c commit
  if [ -z "$src" ]; then
    for c in ../llm.c "$HOME/llm.c" /work/.mirror/karpathy+llm.c/repo; do
      [ -e "$c" ] && { src=$c; break; }
    done
  fi
  [ -n "$src" ] || { echo "no LLMC_SRC and none of ../llm.c, ~/llm.c, /work/.mirror/karpathy+llm.c/repo"; return 1; }
  rm -rf "$dst"; mkdir -p "$dst"
  if [ -f "$src/train_gpt2.cu" ]; then # a checkout
    cp -a "$src/train_gpt2.cu" "$src/LICENSE" "$src/llmc" "$dst/" 2>/dev/null ||
      { rm -rf "$dst"; echo "$src lacks train_gpt2.cu, LICENSE or llmc/"; return 1; }
    commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "unknown (a plain copy)")
  elif commit=$(git --git-dir="$src" rev-parse HEAD 2>/dev/null); then # a bare repository
    git --git-dir="$src" archive HEAD train_gpt2.cu LICENSE llmc | tar -x -C "$dst" ||
      { rm -rf "$dst"; echo "git archive of $src failed"; return 1; }
  else
    rm -rf "$dst"; echo "LLMC_SRC=$src is neither an llm.c checkout nor a git directory"; return 1
  fi
  # carried under its own licence only: MIT, kept beside the code
  grep -q "MIT License" "$dst/LICENSE" 2>/dev/null ||
    { rm -rf "$dst"; echo "$src's LICENSE is not the MIT licence: not copied"; return 1; }
  echo "$commit $src" >"$dst/COMMIT"
  echo "llm.c $commit from $src into $dst ($(du -sb "$dst" | cut -f1) bytes)"
}

# ------------------------------------------------------------------ device run
out=${OUT:-build/device-check}
step_rc=0
say() { echo "device-check: $*" | tee -a "$out/summary.txt"; }

# CUDA_HOME, and NCCL_HOME when nccl.h / libnccl / cuBLAS are not in the toolkit
find_cuda() {
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    local nv; nv=$(command -v nvcc || true)
    [ -n "$nv" ] && CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$nv")")")
  fi
  [ -x "$CUDA_HOME/bin/nvcc" ] || { say "FAIL: no nvcc (looked in \$CUDA_HOME, /usr/local/cuda, PATH)"; return 1; }
  export CUDA_HOME
  local need_shim=0 f
  for f in include/nccl.h include/cublasLt.h include/cublas_v2.h; do
    [ -f "$CUDA_HOME/$f" ] || need_shim=1
  done
  for f in libnccl.so libcublas.so libcublasLt.so; do
    [ -e "$CUDA_HOME/lib64/$f" ] || need_shim=1
  done
  [ $need_shim = 0 ] && return 0
  # PyTorch's pip wheels carry NCCL and cuBLAS (headers and versioned .so):
  # a shim folder links the toolkit's copies where they exist, else the
  # wheels', under the names the build wants (NCCL_HOME/include, /lib)
  local shim=build/device-shim site d h so base
  site=$(python3 -c 'import nvidia, os; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
  rm -rf "$shim"; mkdir -p "$shim/include" "$shim/lib"
  for d in "$CUDA_HOME/include" "$site"/*/include; do # toolkit first: first link wins
    [ -d "$d" ] || continue
    for h in "$d"/nccl* "$d"/cublas*; do
      [ -e "$h" ] && [ ! -e "$shim/include/$(basename "$h")" ] && ln -s "$h" "$shim/include/"
    done
  done
  for d in "$CUDA_HOME/lib64" "$site"/*/lib; do
    [ -d "$d" ] || continue
    for so in "$d"/libnccl.so* "$d"/libcublas.so* "$d"/libcublasLt.so*; do
      [ -e "$so" ] || continue
      base=$(basename "$so" | sed 's/\.so.*/.so/')
      [ -e "$shim/lib/$base" ] || ln -s "$so" "$shim/lib/$base"
    done
  done
  for f in include/nccl.h include/cublasLt.h include/cublas_v2.h lib/libnccl.so lib/libcublas.so lib/libcublasLt.so; do
    [ -e "$shim/$f" ] || { say "FAIL: $(basename "$f") neither in $CUDA_HOME nor in python's nvidia packages (${site:-none})"; return 1; }
  done
  export NCCL_HOME=$PWD/$shim
  say "NCCL/cuBLAS not all in $CUDA_HOME: using $shim (links into $site)"
}

doctor() {
  {
    echo "== $(date -u +%FT%TZ)"
    nvidia-smi -L 2>&1 || echo "no nvidia-smi"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
    "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>&1 | tail -2 || true
    gcc --version 2>&1 | head -1
    ldd --version 2>&1 | head -1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
    [ -f "$deps/MANIFEST" ] && head -2 "$deps/MANIFEST"
  } >>"$out/machine.txt" 2>&1
  cat "$out/machine.txt"
}

device_run() {
  local tests=$1 bench=$2 t0; t0=$(date +%s)
  # the whole command ends inside the device tool's 10 minutes: the bench skips
  # rows that would start too late (BENCH_DEADLINE), the tests get what the
  # build left them minus two minutes for the bench's first rows
  export BENCH_DEADLINE=${BENCH_DEADLINE:-$((t0 + ${BUDGET_S:-570}))}
  mkdir -p "$out"
  : >"$out/summary.txt"
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    say "FAIL: no GPU on this machine (nvidia-smi lists none): run this on the GPU machine"
    return 1
  fi
  local mk=()
  if [ -d "$deps/lib" ]; then
    mk+=(DEPS_PREFIX="$deps")
  elif ! pkg-config --exists yaml-0.1 libuv openblas zlib libxxhash libcjson libpcre2-8 libutf8proc 2>/dev/null; then
    say "FAIL: no $deps and the system lacks the libraries: run scripts/device-check.sh --prepare on the build machine and carry $deps"
    return 1
  fi
  find_cuda || return 1
  doctor
  [ -n "${NCCL_HOME:-}" ] && mk+=(NCCL_HOME="$NCCL_HOME")
  mk+=(CUDA_HOME="$CUDA_HOME" CUDA=1)
  local j; j=$(nproc 2>/dev/null || echo 4)
  say "build: make -j$j ${mk[*]} all gpu-tests-bin gpu-bench-bin"
  if ! make -j"$j" --no-print-directory "${mk[@]}" all gpu-tests-bin gpu-bench-bin >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    say "FAIL: build (log: $out/build.log)"
    return 1
  fi
  say "build: ok ($(grep -c 'nvcc' "$out/build.log") nvcc compiles, $(($(date +%s) - t0)) s)"
  if [ "$tests" = 1 ]; then
    local ts; ts=$(date +%s)
    local tlimit=$((BENCH_DEADLINE - ts - (bench ? 120 : 10)))
    [ $tlimit -lt 60 ] && tlimit=60
    timeout -k 10 "$tlimit" make --no-print-directory "${mk[@]}" test-gpu 2>&1 | tee "$out/test-gpu.log"
    local rc=${PIPESTATUS[0]} last; last=$(tail -1 "$out/test-gpu.log")
    [ "$rc" = 124 ] && last="stopped after ${tlimit}s (BUDGET_S): $last"
    # the two-ranks-on-one-GPU runs (test/gpu/share_gpu.sh), one line each
    grep -E '^(ok|not ok) - share_gpu' "$out/test-gpu.log" | sed 's/^/  /' >>"$out/summary.txt"
    if [ "$rc" -ne 0 ] || ! grep -qE '^[1-9][0-9]* passed, 0 failed$' <<<"$last"; then
      step_rc=1; say "FAIL: make test-gpu: $last"
    else
      say "make test-gpu: $last"
    fi
    say "make test-gpu took $(($(date +%s) - ts)) s"
  fi
  if [ "$bench" = 1 ]; then
    # shellcheck disable=SC2046
    env "${mk[@]}" OUT="$out" scripts/bench/gpu.sh 2>&1 | tee "$out/bench.log"
    if [ "${PIPESTATUS[0]}" -ne 0 ]; then step_rc=1; say "FAIL: scripts/bench/gpu.sh (log: $out/bench.log)"
    else say "bench: $(grep -c '^ratio' "$out/bench.log") ratio lines (table: $out/bench-gpu.txt)"; fi
    say "bench rows: $(grep -c . "$out/bench-gpu.jsonl" 2>/dev/null) in all, $(grep -c '"failed": true' "$out/bench-gpu.jsonl" 2>/dev/null) failed, of which $(grep -c 'skipped: out of time' "$out/bench-gpu.jsonl" 2>/dev/null) skipped for the time budget"
    grep -E '^(ratio|memory) ' "$out/bench.log" | sed 's/^/  /' >>"$out/summary.txt"
  fi
  say "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), date: $(date -u +%F), $(($(date +%s) - t0)) s in all"
  return $step_rc
}

case "${1:-}" in
  --prepare) prepare ;;
  --tests) device_run 1 0 ;;
  --bench) device_run 0 1 ;;
  ""|--all) device_run 1 1 ;;
  -h|--help) sed -n '2,/^# Exit status/p' "$0" ;;
  *) echo "usage: scripts/device-check.sh [--prepare|--tests|--bench|--all]" >&2; exit 2 ;;
esac
