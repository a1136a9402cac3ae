#!/usr/bin/env bash
# Builds ember's CUDA targets for one GPU architecture and packs them, with the runner
# (run.sh) and the shared libraries a CUDA machine may lack, into one tarball. Needs the CUDA
# toolkit (nvcc), not a GPU. On the GPU machine: tar xzf ...; ember-gpu-check/run.sh
#
#   tools/gpu_check/pack.sh [--arch 90] [--build-dir DIR] [--no-build] [--out FILE]
#                           [--with-cuda-libs] [--jobs N]
#
#   --arch A          CUDA architecture to compile for (default 90; 80 for an A100)
#   --build-dir DIR   build directory (default build/gpu_check)
#   --no-build        pack DIR as it is (e.g. --build-dir build/release), without configuring
#   --out FILE        the tarball (default <build-dir>/ember-gpu-check.tar.gz)
#   --with-cuda-libs  also carry libcudart, libcublas, libcublasLt and libnccl (hundreds of
#                     MiB) for a GPU machine whose driver is new enough but lacks the toolkit
#   --jobs N          build parallelism (default: every core)
#
# Libraries carried (lib/ in the tarball): every library ldd resolves for the binaries that is
# neither glibc's core (libc, libm, libpthread, libdl, librt, ld-linux, ...) nor part of the
# CUDA driver or toolkit (libcuda, libcudart, libcublas*, libnccl*, libcudnn*, libnvidia*, ...).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

arch=90
build_dir="$root/build/gpu_check"
out=""
no_build=0
with_cuda_libs=0
jobs="$(nproc)"

usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "pack.sh: $*" >&2; exit 2; }
need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi; }

while [ $# -gt 0 ]; do
  case "$1" in
    --arch) need_value "$@"; arch="$2"; shift 2 ;;
    --arch=*) arch="${1#*=}"; shift ;;
    --build-dir) need_value "$@"; build_dir="$2"; shift 2 ;;
    --build-dir=*) build_dir="${1#*=}"; shift ;;
    --out) need_value "$@"; out="$2"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --no-build) no_build=1; shift ;;
    --with-cuda-libs) with_cuda_libs=1; shift ;;
    --jobs) need_value "$@"; jobs="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$arch" =~ ^[0-9]+[af]?$ ]] || die "--arch must be a CUDA architecture such as 80 or 90, not '$arch'"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer, not '$jobs'"
if [ "$no_build" -eq 1 ]; then
  [ -d "$build_dir" ] || die "--build-dir $build_dir does not exist (--no-build packs an existing build)"
else
  mkdir -p "$build_dir"
fi
build_dir="$(cd "$build_dir" && pwd)"
[ -n "$out" ] || out="$build_dir/ember-gpu-check.tar.gz"
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

binaries=(ember_tests train_mlp train_resmlp train_ddp train_gpt2 bench_matmul bench_train_step
          bench_elementwise bench_allocator bench_loader bench_gpt2)

# ---- build ------------------------------------------------------------------------------
if [ "$no_build" -eq 0 ]; then
  command -v cmake >/dev/null || die "cmake is not installed"
  configure=(cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON
             "-DEMBER_CUDA_ARCHITECTURES=$arch" -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_EXAMPLES=ON
             -DEMBER_BUILD_BENCHMARKS=ON)
  if [ ! -f "$build_dir/CMakeCache.txt" ] && command -v ninja >/dev/null; then
    configure+=(-G Ninja)
  fi
  echo "pack.sh: configuring $build_dir (Release, sm_$arch)"
  "${configure[@]}"
  echo "pack.sh: building ${binaries[*]} with $jobs jobs"
  cmake --build "$build_dir" --parallel "$jobs" --target "${binaries[@]}"
fi
[ -f "$build_dir/CMakeCache.txt" ] || die "$build_dir is not a CMake build directory"

cache_value() {  # cache_value NAME: a CMakeCache.txt entry's value, or nothing
  sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" | head -n 1
}
build_type="$(cache_value CMAKE_BUILD_TYPE)"
archs="$(cache_value EMBER_CUDA_ARCHITECTURES)"
cuda_cmake="$(find "$build_dir/CMakeFiles" -maxdepth 2 -name CMakeCUDACompiler.cmake | head -n 1)"
[ -n "$cuda_cmake" ] || die "$build_dir has no CUDA build (was nvcc found when it was configured?)"
nvcc_version="$(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")$/\1/p' "$cuda_cmake")"
[ "$build_type" = Release ] || echo "pack.sh: warning: $build_dir is a '$build_type' build, not Release" >&2
if [ "$no_build" -eq 1 ] && [[ ";$archs;" != *";$arch;"* ]]; then
  echo "pack.sh: note: $build_dir is built for architectures '$archs' (--arch is ignored with --no-build)" >&2
fi

# ---- stage ------------------------------------------------------------------------------
stage_parent="$(mktemp -d "${TMPDIR:-/tmp}/ember-gpu-check.XXXXXX")"
trap 'rm -rf "$stage_parent"' EXIT
stage="$stage_parent/ember-gpu-check"
mkdir -p "$stage/bin" "$stage/lib"

found=()
for name in "${binaries[@]}"; do
  # Wherever the generator put it: a regular executable of that name outside CMakeFiles/ and
  # outside unpacked tarballs (the gpu_check_pack test leaves one, with older binaries, in the
  # build tree).
  path="$(find "$build_dir" \( -path '*/CMakeFiles' -o -name ember-gpu-check \) -prune -o \
          -type f -name "$name" -perm -u+x -print | head -n 1)"
  if [ -z "$path" ]; then
    echo "pack.sh: warning: $name is not in $build_dir: left out" >&2
    continue
  fi
  cp "$path" "$stage/bin/"
  found+=("$stage/bin/$name")
done
[ ${#found[@]} -gt 0 ] || die "none of ${binaries[*]} is built in $build_dir"
[ -e "$stage/bin/ember_tests" ] || echo "pack.sh: warning: no ember_tests: the device cases will be missing" >&2

# libember.so* lives in <build>/lib: copy the files and keep the links.
shopt -s nullglob
libember=("$build_dir"/lib/libember.so*)
shopt -u nullglob
[ ${#libember[@]} -gt 0 ] || die "no libember.so* in $build_dir/lib"
cp -P "${libember[@]}" "$stage/lib/"
cp "$here/run.sh" "$stage/run.sh"
# The allocation traces bench_allocator replays on the GPU, and PyTorch's replay of them.
mkdir -p "$stage/traces" "$stage/reference"
cp "$root"/benchmarks/traces/checkpointed_varlen/*.trace.gz "$stage/traces/" 2>/dev/null || true
cp "$root/benchmarks/reference/replay_trace_torch.py" "$stage/reference/"
# ember against PyTorch on the GPU (compare.py --device cuda) and the scripts it runs.
cp "$root"/benchmarks/reference/{compare,common,models,torch_train_step,gpt2_torch}.py "$stage/reference/"
# The timeline check of train_gpt2 --trace.
mkdir -p "$stage/scripts"
cp "$root/tests/examples/check_trace.py" "$stage/scripts/"
# train_gpt2's text on the GPU machine (which has no fortunes package): ember's own docs.
cat "$root"/docs/*.md "$root/README.md" >"$stage/corpus.txt"
chmod +x "$stage/run.sh"

# glibc's core: the target's own must be used. The CUDA driver and toolkit: the target's own
# (unless --with-cuda-libs).
is_glibc() {
  case "$1" in
    libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|linux-vdso*|\
    libresolv.so.*|libutil.so.*|libanl.so.*|libnsl.so.*|libBrokenLocale.so.*|libnss_*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case "$1" in
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libcudnn*|libnvidia*|\
    libnvrtc*|libnvJitLink*|libcufft*|libcurand*|libcusparse*|libcusolver*|libcupti*|libnvToolsExt*)
      return 0 ;;
  esac
  case "$2" in /usr/local/cuda*) return 0 ;; esac
  return 1
}

# ldd of every binary and of libember itself; LD_LIBRARY_PATH is the staged lib/ so that the
# libember they name is the one packed.
declare -A carried=()
missing=()
cuda_needed=()
while read -r soname path; do
  [ -n "$soname" ] || continue
  if [ "$path" = "not" ]; then  # "libx.so => not found"
    if is_cuda "$soname" ""; then cuda_needed+=("$soname"); else missing+=("$soname"); fi
    continue
  fi
  [ -f "$path" ] || continue
  is_glibc "$soname" && continue
  if is_cuda "$soname" "$path"; then
    cuda_needed+=("$soname")
    # The driver's own libraries are never carried: they must match the kernel module.
    case "$soname" in libcuda.so*|libnvidia*) continue ;; esac
    [ "$with_cuda_libs" -eq 1 ] || continue
  fi
  [ -e "$stage/lib/$soname" ] && continue  # libember itself
  carried["$soname"]="$path"
done < <(for f in "${found[@]}" "$stage"/lib/libember.so.*.*.*; do
           LD_LIBRARY_PATH="$stage/lib" ldd "$f"
         done | awk '$2 == "=>" { print $1, $3 }' | sort -u)

if [ ${#missing[@]} -gt 0 ]; then
  die "ldd cannot resolve $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')on this machine"
fi
# Opened with dlopen (never in ldd's list): cuBLASLt, NCCL and cuDNN by libember (cuDNN's
# frontend opens the shared CUDA runtime too), cuBLAS by bench_matmul.
cuda_major="${nvcc_version%%.*}"
dlopened=("libcublasLt.so.$cuda_major" "libcublas.so.$cuda_major" libnccl.so.2 libcudnn.so.9
          "libcudart.so.$cuda_major")
if [ "$with_cuda_libs" -eq 1 ]; then
  for soname in "${dlopened[@]}"; do
    [ -n "${carried[$soname]:-}" ] && continue
    for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      if [ -f "$dir/$soname" ]; then carried["$soname"]="$dir/$soname"; break; fi
    done
  done
fi
for soname in "${!carried[@]}"; do
  cp -L "${carried[$soname]}" "$stage/lib/$soname"
done

# What is in the tarball and what it was built with: run.sh prints it.
{
  echo "ember $(cache_value CMAKE_PROJECT_VERSION)"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) from $build_dir"
  echo "build_type $build_type"
  echo "cuda_architectures $archs"
  echo "nvcc $nvcc_version"
  echo "binaries $(cd "$stage/bin" && echo *)"
  echo "cuda_libraries_needed $(printf '%s\n' "${cuda_needed[@]}" "${dlopened[@]}" |
                                sort -u | tr '\n' ' ' | sed 's/ $//')"
  echo "cuda_libraries_carried $([ "$with_cuda_libs" -eq 1 ] && echo yes || echo no)"
  echo "carried $(cd "$stage/lib" && echo *)"
} >"$stage/MANIFEST"

tar -C "$stage_parent" -czf "$out" ember-gpu-check
echo "pack.sh: $out ($(du -h "$out" | cut -f1)): ${#found[@]} binaries, ${#carried[@]} carried libraries"
echo "pack.sh: on the GPU machine: tar xzf $(basename "$out") && ember-gpu-check/run.sh"
