#!/usr/bin/env bash
# ember's GPU check, in one go: run it from the unpacked tarball of tools/gpu_check/pack.sh on a
# machine with an NVIDIA driver, within --budget seconds (450 by default; not yet timed on a GPU).
#
#   ember-gpu-check/run.sh [--quick] [--only STEP[,STEP...]] [--list] [--out DIR]
#                          [--budget SECONDS] [--build-dir DIR] [--cuda-lib-dir DIR]
#                          [--allow-no-gpu]
#
#   --quick            shorter training runs, fewer benchmark rows and sanitized cases
#   --only STEPS       run only these steps (comma-separated; a prefix such as train_mlp or
#                      bench picks every step it starts; the gpu probe always runs)
#   --list             list the steps and exit
#   --out DIR          where summary.txt and logs/ go (default: results/ next to this script,
#                      or <build-dir>/gpu_check_results with --build-dir)
#   --budget SECONDS   total time (default 450): each step's timeout is cut to what is left,
#                      and steps that find less than 15 s left are skipped
#   --build-dir DIR    take the binaries from an ember build tree instead of bin/ and lib/
#   --cuda-lib-dir DIR where libcudart/libcublas/libcublasLt/libnccl are, if the loader and the
#                      usual places (/usr/local/cuda, Python's nvidia-* wheels) lack them
#   --allow-no-gpu     no GPU is a SKIP, not a failure (to check the tarball itself)
#
# Every step runs under `timeout`, failures do not stop the run, and the end prints one table
# (step, PASS/FAIL/SKIP, seconds, detail) that is also written to <out>/summary.txt, with each
# step's full output in <out>/logs/<step>.log. Exit code 0 only when no step failed.
set -uo pipefail
export LC_ALL=C  # decimal points, sort orders and messages as this script parses them

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
quick=0
only=""
out_dir=""
budget=450
build_dir=""
cuda_lib_dir=""
list=0
allow_no_gpu=0

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "run.sh: $*" >&2; exit 2; }
need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --only) need_value "$@"; only="${only:+$only,}$2"; shift 2 ;;
    --only=*) [ -n "${1#*=}" ] || die "--only needs a value"; only="${only:+$only,}${1#*=}"; shift ;;
    --list) list=1; shift ;;
    --allow-no-gpu) allow_no_gpu=1; shift ;;
    --out) need_value "$@"; out_dir="$2"; shift 2 ;;
    --out=*) out_dir="${1#*=}"; shift ;;
    --budget) need_value "$@"; budget="$2"; shift 2 ;;
    --budget=*) budget="${1#*=}"; shift ;;
    --build-dir) need_value "$@"; build_dir="$2"; shift 2 ;;
    --build-dir=*) build_dir="${1#*=}"; shift ;;
    --cuda-lib-dir) need_value "$@"; cuda_lib_dir="$2"; shift 2 ;;
    --cuda-lib-dir=*) cuda_lib_dir="${1#*=}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || die "--budget needs a positive number of seconds, not '$budget'"

# ---- the steps --------------------------------------------------------------------------
# Cases whose kernels racecheck and synccheck look at: ember's own matmul, map, reduction,
# softmax and layer-norm kernels, on cuda:0.
kernel_suites=(Matmul BiasActivation Map MapReduce Sum Max ColumnSums Argmax Reductions
               SoftmaxCrossEntropy LayerNormOp LayerNormEdges Attention Embedding Dropout FusedOps)
kernel_filter="$(printf 'Devices/%s.*/cuda0:' "${kernel_suites[@]}")"
kernel_filter="${kernel_filter%:}"
# cuDNN's own kernels are left out of racecheck and synccheck: its warp-specialized flash
# attention kernels report divergent barriers and races there (the first H100 run of the
# attention cases), and they are not ember's. The automatic attention kernel (cuDNN on a GPU) is
# ember's SIMT one there (EMBER_ATTENTION_KERNEL); the tensor-core cases name their kernel.
kernel_filter="$kernel_filter-*Cudnn*:*TheEnvironmentChoosesTheAutomaticKernel*"

# In priority order: a --budget too short for all of them skips the last ones. First what never
# ran on a GPU (or changed since it last did), then what a GPU run has checked before.
steps=(binaries_start gpu device_cases
       train_mlp_f32 train_mlp_graph_f32 train_mlp_bf16 train_mlp_graph_bf16
       train_gpt2_d12 train_gpt2_d12_graph train_gpt2_timeline torch_reference
       train_resmlp_none train_resmlp_selective train_resmlp_graph train_gpt2_d12_cudnn bench_gpt2_trace bench_loader
       memcheck racecheck bench_train_step train_gpt2_trace bench_allocator
       train_mlp_f16 train_resmlp_full train_ddp bench_matmul bench_elementwise synccheck initcheck)
describe() {
  case "$1" in
    binaries_start) echo "every binary starts (ember_tests --gtest_list_tests, --help, ldd)" ;;
    gpu) echo "nvidia-smi and ember see a GPU that the kernels are built for (else the GPU steps skip)" ;;
    device_cases) echo "ember_tests --gtest_filter='*cuda0*' (the device cases on cuda:0)" ;;
    train_mlp_graph_*) echo "train_mlp --device cuda --cuda-graph --amp ${1#train_mlp_graph_}: the same losses as eager" ;;
    train_mlp_*) echo "train_mlp --device cuda --amp ${1#train_mlp_}" ;;
    train_resmlp_graph) echo "train_resmlp --device cuda --cuda-graph: the same losses as --checkpoint none" ;;
    train_resmlp_*) echo "train_resmlp --device cuda --checkpoint ${1#train_resmlp_}" ;;
    train_ddp) echo "train_ddp --device cuda, one rank without a launcher" ;;
    train_gpt2_d12) echo "train_gpt2 --model d12 --amp bf16 --seq 1024 on the GPU: tokens/s and MFU" ;;
    train_gpt2_d12_cudnn) echo "the same with cuDNN's fused attention (EMBER_ATTENTION_KERNEL=cudnn)" ;;
    train_gpt2_d12_graph) echo "the same with --cuda-graph: one replay per step, the eager run's losses" ;;
    train_gpt2_trace) echo "train_gpt2 d12 with variable lengths and full checkpointing, recording its allocations" ;;
    train_gpt2_timeline) echo "train_gpt2 --trace on the GPU: host ranges and CUPTI's kernel intervals, checked by check_trace.py" ;;
    torch_reference) echo "compare.py --device cuda: bench_train_step's and bench_gpt2's GPU rows against PyTorch (eager, CUDA graph, torch.compile)" ;;
    bench_gpt2_trace) echo "bench_gpt2's GPU trace_overhead rows: a step with profile::Trace recording (CUPTI) against without" ;;
    bench_matmul) echo "bench_matmul's GPU rows (ember tiled and cuBLASLt against cuBLAS)" ;;
    bench_train_step) echo "bench_train_step's GPU rows (f32, bf16, f16 training steps)" ;;
    bench_elementwise) echo "bench_elementwise's GPU rows (fused chain against separate ops)" ;;
    bench_loader) echo "bench_loader --device cuda: data wait with 0-4 workers, the loader's copies against a plain pinned copy" ;;
    bench_allocator) echo "the allocation traces on the GPU: ember (bench_allocator --device) and PyTorch's allocator" ;;
    memcheck) echo "compute-sanitizer memcheck over the device cases (debug_guard allocator)" ;;
    racecheck) echo "compute-sanitizer racecheck over the kernel cases" ;;
    synccheck) echo "compute-sanitizer synccheck over the kernel cases" ;;
    initcheck) echo "compute-sanitizer initcheck over a short train_mlp run" ;;
  esac
}
if [ "$list" -eq 1 ]; then
  for s in "${steps[@]}"; do printf '%-24s %s\n' "$s" "$(describe "$s")"; done
  exit 0
fi
selected() {  # the gpu probe always runs; others when --only names them or a prefix of them
  if [ -z "$only" ] || [ "$1" = gpu ]; then return 0; fi
  local pattern patterns
  IFS=, read -ra patterns <<<"$only"
  for pattern in "${patterns[@]}"; do
    # shellcheck disable=SC2053  # a glob in --only is meant
    [[ "$1" == $pattern || "$1" == "$pattern"* ]] && return 0
  done
  return 1
}
if [ -n "$only" ]; then
  IFS=, read -ra patterns <<<"$only"
  for pattern in "${patterns[@]}"; do
    hit=0
    for s in "${steps[@]}"; do
      # shellcheck disable=SC2053
      [[ "$s" == $pattern || "$s" == "$pattern"* ]] && hit=1
    done
    [ "$hit" -eq 1 ] || die "--only: no step matches '$pattern' (see --list)"
  done
fi

# ---- the binaries and their libraries ---------------------------------------------------
names=(ember_tests train_mlp train_resmlp train_ddp train_gpt2 bench_matmul bench_train_step
       bench_elementwise bench_allocator bench_loader bench_gpt2)
declare -A bin=()
if [ -n "$build_dir" ]; then
  [ -d "$build_dir" ] || die "--build-dir $build_dir is not a directory"
  build_dir="$(cd "$build_dir" && pwd)"
  for name in "${names[@]}"; do
    path="$(find "$build_dir" \( -path '*/CMakeFiles' -o -name ember-gpu-check \) -prune -o \
            -type f -name "$name" -perm -u+x -print | head -n 1)"
    [ -n "$path" ] && bin[$name]="$path"
  done
  [ -n "$out_dir" ] || out_dir="$build_dir/gpu_check_results"
  manifest=""
else
  [ -d "$here/bin" ] || die "no bin/ next to $0: run the unpacked tarball's run.sh (tools/gpu_check/pack.sh makes it), or pass --build-dir"
  for name in "${names[@]}"; do
    [ -x "$here/bin/$name" ] && bin[$name]="$here/bin/$name"
  done
  # The carried libraries (lib/) come first: the binaries' run paths point into the build tree.
  # (nvidia-smi and python3 run without them: lib/ has an older libstdc++ than a newer distro's.)
  export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -n "$out_dir" ] || out_dir="$here/results"
  manifest="$here/MANIFEST"
fi
cuda_libs_missing=()
cuda_dirs_added=()
if [ -n "$cuda_lib_dir" ]; then
  [ -d "$cuda_lib_dir" ] || die "--cuda-lib-dir $cuda_lib_dir is not a directory"
  cuda_lib_dir="$(cd "$cuda_lib_dir" && pwd)"
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda_lib_dir"
  cuda_dirs_added+=("$cuda_lib_dir")
fi
manifest_value() { [ -n "$manifest" ] && [ -f "$manifest" ] && sed -n "s/^$1 //p" "$manifest" | head -n 1; }

# The CUDA libraries the binaries need (libcudart, libcublas, libnccl: ember_tests; libcublasLt,
# libnccl: opened by ember when first used) come from the machine. Where the loader does not
# know them, look in the usual places and add the first directory that has each.
if [ -n "$manifest" ]; then
  read -ra cuda_needed <<<"$(manifest_value cuda_libraries_needed)"
  shopt -s nullglob
  candidates=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
               /usr/local/cuda-*/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib)
  for site in $(env -u LD_LIBRARY_PATH python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null) \
              /usr/local/lib/python3*/dist-packages /opt/*/.venv/lib/python3*/site-packages \
              /opt/conda/lib/python3*/site-packages; do
    candidates+=("$site"/nvidia/*/lib)
  done
  shopt -u nullglob
  loader_cache="$(ldconfig -p 2>/dev/null)"
  for soname in "${cuda_needed[@]}"; do
    known=0
    grep -qF " $soname " <<<"$loader_cache" && known=1
    IFS=: read -ra ld_dirs <<<"$LD_LIBRARY_PATH"
    for dir in "${ld_dirs[@]}"; do [ -n "$dir" ] && [ -e "$dir/$soname" ] && known=1; done
    [ "$known" -eq 1 ] && continue
    for dir in "${candidates[@]}"; do
      if [ -e "$dir/$soname" ]; then
        export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
        cuda_dirs_added+=("$dir")
        known=1
        break
      fi
    done
    [ "$known" -eq 1 ] || cuda_libs_missing+=("$soname")
  done
fi

sanitizer=""
for candidate in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
                 /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then sanitizer="$candidate"; break; fi
done

# Never a launcher's rank variables: train_ddp runs as one rank on its own.
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS RANK WORLD_SIZE

mkdir -p "$out_dir" || die "cannot create $out_dir"
out_dir="$(cd "$out_dir" && pwd)"
logs="$out_dir/logs"
mkdir -p "$logs"
rm -f "$logs"/*.log "$out_dir/summary.txt"  # this script's own files only, from an earlier run

# ---- running and recording --------------------------------------------------------------
now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
run_start="$(now)"
elapsed() { awk -v a="$run_start" -v b="$(now)" 'BEGIN { printf "%d", b - a }'; }

results=()      # "step|result|seconds|detail"
failures=0
step_limit=0    # the timeout of the step in hand (its own, cut to the budget)
step_own=0
timed_out=0

# run_logged LOG SECONDS COMMAND...: runs COMMAND under timeout, appending to LOG; returns its
# exit code and sets timed_out.
run_logged() {
  local log="$1" seconds="$2"
  shift 2
  printf '$ %s\n' "$*" >>"$log"
  timeout --kill-after=10 "$seconds" "$@" >>"$log" 2>&1 </dev/null
  local rc=$?
  timed_out=0
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    timed_out=1
    printf '\n[run.sh: timed out after %s s]\n' "$seconds" >>"$log"
  fi
  printf '[run.sh: exit code %s]\n' "$rc" >>"$log"
  return "$rc"
}
timeout_detail() {
  if [ "$step_limit" -lt "$step_own" ]; then
    echo "timed out after $step_limit s (cut to the --budget of $budget s)"
  else
    echo "timed out after $step_limit s"
  fi
}
# finish_step RC LOG ERROR_REGEX PASS_DETAIL: FAIL with the log's first error line where the
# command timed out or failed, else PASS with PASS_DETAIL (sets res and detail).
finish_step() {
  if [ "$timed_out" -eq 1 ] || [ "$1" -ne 0 ]; then
    res=FAIL
    detail="exit code $1: $(first_error_line "$2" "$3")"
  else
    res=PASS
    detail="$4"
  fi
}
first_error_line() {  # first_error_line LOG REGEX: the first output line matching, shortened
  grep -vE '^\$ |^\[run.sh' "$1" | grep -m 1 -E "$2" | sed -e 's/^=* *//' | cut -c 1-160
}

# gtest's counts: sets passed, failed and gtest_detail from LOG.
gtest_counts() {
  local log="$1"
  passed="$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | tail -n 1 | grep -oE '[0-9]+' | head -n 1)"
  failed="$(grep -E '^\[  FAILED  \] [0-9]+ tests?, listed below' "$log" | tail -n 1 |
            grep -oE '[0-9]+' | head -n 1)"
  local ran
  ran="$(grep -E '^\[==========\] [0-9]+ tests? from .* ran' "$log" | tail -n 1)"
  if [ -z "$ran" ]; then  # ended before gtest's summary: a crash or the timeout
    passed="$(grep -cE '^\[       OK \]' "$log")"
    failed="$(grep -cE '^\[  FAILED  \] .*\(' "$log")"
    local last
    last="$(grep -E '^\[ RUN      \]' "$log" | tail -n 1 | sed 's/^\[ RUN      \] //')"
    gtest_detail="$passed passed, $failed failed before it ended in ${last:-?}"
    return 1
  fi
  passed="${passed:-0}"
  failed="${failed:-0}"
  gtest_detail="$passed passed, $failed failed"
  if [ "$failed" -gt 0 ]; then
    local names
    names="$(grep -E '^\[  FAILED  \] .*\(' "$log" | sed -E 's/^\[  FAILED  \] ([^ ,]*).*/\1/' |
             sort -u | head -n 3 | tr '\n' ' ')"
    names="${names% }"
    gtest_detail="$gtest_detail: $names"
  fi
  [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

# ---- the steps' bodies: each sets res (PASS/FAIL/SKIP) and detail ---------------------------
step_binaries_start() {
  local log="$logs/binaries_start.log" problems=() name rc
  local count=0 cases=0 cuda_cases=0
  for name in "${names[@]}"; do
    if [ -z "${bin[$name]:-}" ]; then
      problems+=("$name missing")
      continue
    fi
    case "$name" in
      ember_tests) run_logged "$log" 60 "${bin[$name]}" --gtest_list_tests ;;
      train_*|bench_loader) run_logged "$log" 30 "${bin[$name]}" --help ;;
      bench_*) run_logged "$log" 60 "${bin[$name]}" --benchmark_list_tests=true ;;
    esac
    rc=$?
    if [ "$rc" -ne 0 ]; then
      # The last line of its output, without the binary's path ("error while loading ...").
      problems+=("$name: exit code $rc ($(grep -v '^\[run.sh' "$log" | tail -n 1 | sed 's|^/[^:]*: ||' |
                                           cut -c 1-110))")
      continue
    fi
    count=$((count + 1))
    if [ "$name" = ember_tests ]; then
      local listing
      listing="$(sed -n '/--gtest_list_tests$/,/^\[run.sh: exit code/p' "$log")"
      cases="$(grep -c '^  ' <<<"$listing")"
      # A parameterised case is listed as "  Case/cuda0  # GetParam() = cuda:0".
      cuda_cases="$(grep -cE '^  [^ ]+/cuda0( |$)' <<<"$listing")"
    fi
  done
  # What the loader cannot find, binary by binary.
  local missing
  missing="$(for name in "${names[@]}"; do
               [ -n "${bin[$name]:-}" ] && ldd "${bin[$name]}" 2>&1 | awk '/not found/ { print $1 }'
             done | sort -u | tr '\n' ' ' | sed 's/ $//')"
  { echo "\$ ldd (not found)"; echo "${missing:-none}"; } >>"$log"
  [ -n "$missing" ] && problems+=("ldd: not found: $missing")
  if [ ${#problems[@]} -eq 0 ]; then
    res=PASS
    detail="$count binaries start; ember_tests lists $cases cases, $cuda_cases on cuda0"
  else
    res=FAIL
    detail="$(printf '%s; ' "${problems[@]}")"
    detail="${detail%; }"
  fi
}

gpu_ok=0
gpu_why="the gpu probe did not run"
step_gpu() {
  local log="$logs/gpu.log" smi_why="" query=""
  if command -v nvidia-smi >/dev/null; then
    run_logged "$log" 30 env -u LD_LIBRARY_PATH nvidia-smi
    # name, driver, compute capability, memory: one line per GPU
    local answer
    answer="$(timeout 30 env -u LD_LIBRARY_PATH nvidia-smi \
              --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1)"
    printf '$ nvidia-smi --query-gpu=...\n%s\n' "$answer" >>"$log"
    query="$(grep -E ', [0-9]+\.[0-9]+, ' <<<"$answer" | head -n 1)"
    [ -n "$query" ] || smi_why="nvidia-smi lists no GPU ($(head -n 1 <<<"$answer" | cut -c 1-80))"
  else
    smi_why="nvidia-smi not found"
  fi
  # ember's own view: --device auto takes cuda:0 when ember can use it, else says why not.
  local ember_why="" ember_gpu=0 probe="$logs/gpu_probe.log"
  if [ -n "${bin[train_mlp]:-}" ]; then
    run_logged "$probe" 60 "${bin[train_mlp]}" --device auto --steps 1 --points 20 --width 8 \
      --depth 1 --log-every 1
    if grep -q '^model: .* on cuda:0' "$probe"; then
      ember_gpu=1
    else
      ember_why="$(sed -n 's/^ember: running on the CPU (\(.*\))$/\1/p' "$probe" | head -n 1)"
      [ -n "$ember_why" ] || ember_why="train_mlp did not start: $(first_error_line "$probe" 'error')"
    fi
    cat "$probe" >>"$log"
    rm -f "$probe"
  else
    ember_why="no train_mlp to ask"
  fi
  local arch_note="" archs cc
  archs="$(manifest_value cuda_architectures)"
  [ -n "$build_dir" ] && archs="$(sed -n 's/^EMBER_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)"
  cc="$(awk -F', ' '{ print $3 }' <<<"$query" | tr -d '.')"
  local arch_ok=1
  if [ -n "$cc" ] && [ -n "$archs" ]; then
    if [[ ";$archs;" == *";$cc;"* || ";$archs;" == *";${cc}a;"* ]]; then
      arch_note="built for sm_${archs//;/, sm_}"
    else
      arch_ok=0
      local a
      IFS=';' read -ra arch_list <<<"$archs"
      for a in "${arch_list[@]}"; do
        [[ "${a%[af]}" =~ ^[0-9]+$ ]] && [ "${a%[af]}" -lt "$cc" ] && arch_ok=2
      done
      arch_note="built for sm_${archs//;/, sm_}, the GPU is sm_$cc"
      [ "$arch_ok" -eq 2 ] && arch_note="$arch_note (PTX JIT)"
    fi
  fi
  local cuda_note=""
  [ ${#cuda_libs_missing[@]} -gt 0 ] && cuda_note="; not found: ${cuda_libs_missing[*]} (--cuda-lib-dir)"
  if [ "$ember_gpu" -eq 1 ] && [ "$arch_ok" -ne 0 ]; then
    gpu_ok=1
    res=PASS
    detail="${query:-a GPU (no nvidia-smi)}${arch_note:+; $arch_note}$cuda_note"
  elif [ "$ember_gpu" -eq 1 ]; then
    gpu_why="the kernels are not built for this GPU (see gpu)"
    res=FAIL
    detail="$query; this build's kernels cannot run on it ($arch_note): pack with --arch $cc"
  elif [ -n "$smi_why" ]; then
    # A GPU check without a GPU checked nothing: a failure, unless asked for (the ctest that
    # keeps the tarball working runs it so).
    gpu_why="no GPU (see gpu)"
    res=FAIL
    [ "$allow_no_gpu" -eq 1 ] && res=SKIP
    detail="no GPU: $smi_why; ember: $ember_why$cuda_note"
  else
    gpu_why="ember cannot use the GPU (see gpu)"
    res=FAIL
    detail="$query; ember cannot use it: $ember_why$cuda_note"
  fi
}

step_device_cases() {
  local log="$logs/device_cases.log" rc
  run_logged "$log" "$step_limit" "${bin[ember_tests]}" --gtest_filter='*cuda0*' \
    "--gtest_output=xml:$logs/device_cases.xml"
  rc=$?
  if gtest_counts "$log" && [ "$rc" -eq 0 ]; then
    res=PASS
  else
    res=FAIL
  fi
  detail="$gtest_detail"
  [ "$timed_out" -eq 1 ] && detail="$(timeout_detail): $gtest_detail"
  [ "$res" = FAIL ] && [ "$timed_out" -eq 0 ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ] &&
    detail="exit code $rc: $gtest_detail"
}

# A training example: the command must exit 0 and print its "done:" line; ACC is the least
# validation accuracy (%) that counts as trained.
train_step() {
  local step="$1" acc_min="$2"
  shift 2
  local log="$logs/$step.log" rc
  run_logged "$log" "$step_limit" "$@"
  rc=$?
  local done_line acc
  done_line="$(grep -m 1 '^done: ' "$log")"
  acc="$(sed -nE 's/.*validation accuracy +([0-9.]+)%.*/\1/p' <<<"$done_line")"
  if [ "$timed_out" -eq 1 ]; then
    res=FAIL
    detail="$(timeout_detail); last: $(grep '^step ' "$log" | tail -n 1 | cut -c 1-90)"
  elif [ "$rc" -ne 0 ] || [ -z "$done_line" ]; then
    res=FAIL
    detail="exit code $rc: $(first_error_line "$log" 'error|Error|what\(\)|Abort|fault')"
  elif [ -z "$acc" ] || awk -v a="$acc" -v m="$acc_min" 'BEGIN { exit !(a < m) }'; then
    res=FAIL
    detail="validation accuracy ${acc:-n/a}% is below $acc_min%: ${done_line#done: }"
  else
    res=PASS
    detail="$(sed -E -e 's/^done: //' -e 's/validation accuracy/val acc/' -e 's/ \(chance [0-9.]+%\)//' \
              -e 's/ +/ /g' <<<"$done_line")"
  fi
}

mlp_args=(--device cuda)
[ "$quick" -eq 1 ] && mlp_args+=(--steps 500 --log-every 250)
resmlp_args=(--device cuda)
[ "$quick" -eq 1 ] && resmlp_args+=(--steps 200 --log-every 100)
ddp_args=(--device cuda)  # its default 300 steps even with --quick: 100 reach only 13 %
# The least validation accuracy that counts as trained (chance is 10 %). On the CPU: train_mlp
# 97 % after 500 steps (95 % or more after its default 2000), train_resmlp 96 % after 200,
# train_ddp 89 % after its 300.
mlp_min=90 resmlp_min=85 ddp_min=80

resmlp_none_loss=""
# The losses and validation accuracy of LOG's "done:" line ("2.3022 -> 0.0812 98.10%"); nothing
# when LOG is missing.
done_losses() {
  sed -nE 's/.*loss ([0-9.]+ -> [0-9.]+), validation accuracy +([0-9.]+%).*/\1 \2/p' "$1" \
    2>/dev/null | head -n 1
}
# After a --cuda-graph run's train_step PASSed: a graph replayed (LOG's "cuda graph:" line says
# so) and its losses GRAPHED are EAGER's, those of the same run without a graph (AS names it;
# EAGER is empty when that run has no log); DIFFERS is the detail when they are not.
check_graph_run() {  # check_graph_run LOG GRAPHED EAGER AS DIFFERS
  local graph_line
  graph_line="$(grep -m 1 '^cuda graph: ' "$1" | cut -c 13-130)"
  if ! grep -q 'replayed' <<<"$graph_line"; then
    res=FAIL
    detail="no graph replayed:${graph_line:- no cuda graph line}"
  elif [ -z "$3" ]; then
    detail="$detail;${graph_line}; no eager run to compare with"
  elif [ "$2" = "$3" ]; then
    detail="$detail;${graph_line}; same losses as $4"
  else
    res=FAIL
    detail="$5"
  fi
}
step_train_mlp() { train_step "$1" "$mlp_min" "${bin[train_mlp]}" "${mlp_args[@]}" --amp "${1#train_mlp_}"; }
# The whole step as one CUDA graph: replay gives the eager run's losses and accuracy, bitwise
# (the same run as train_mlp_<amp>, whose log this compares with when it ran).
step_train_mlp_graph() {
  local amp="${1#train_mlp_graph_}"
  train_step "$1" "$mlp_min" "${bin[train_mlp]}" "${mlp_args[@]}" --amp "$amp" --cuda-graph
  [ "$res" = PASS ] || return 0
  local graphed eager
  graphed="$(done_losses "$logs/$1.log")"
  eager="$(done_losses "$logs/train_mlp_$amp.log")"
  check_graph_run "$logs/$1.log" "$graphed" "$eager" eager \
    "losses differ from eager's ($eager): $graphed"
}
step_train_resmlp() {
  local mode="${1#train_resmlp_}"
  train_step "$1" "$resmlp_min" "${bin[train_resmlp]}" "${resmlp_args[@]}" --checkpoint "$mode"
  [ "$res" = PASS ] || return 0
  # Checkpointing recomputes bitwise: the same losses and accuracy as without it.
  local losses
  losses="$(done_losses "$logs/$1.log")"
  if [ "$mode" = none ]; then
    resmlp_none_loss="$losses"
  elif [ -n "$resmlp_none_loss" ]; then
    if [ "$losses" = "$resmlp_none_loss" ]; then
      detail="$detail; same losses as none"
    else
      detail="$detail; losses differ from none's ($resmlp_none_loss)"
    fi
  fi
}
# The whole step, dropout included, as one CUDA graph: the losses of train_resmlp_none's eager run.
step_train_resmlp_graph() {
  train_step train_resmlp_graph "$resmlp_min" "${bin[train_resmlp]}" "${resmlp_args[@]}" \
    --checkpoint none --cuda-graph
  [ "$res" = PASS ] || return 0
  local losses
  losses="$(done_losses "$logs/train_resmlp_graph.log")"
  check_graph_run "$logs/train_resmlp_graph.log" "$losses" "$resmlp_none_loss" none \
    "losses differ from none's ($resmlp_none_loss): $losses"
}
step_train_ddp() { train_step train_ddp "$ddp_min" "${bin[train_ddp]}" "${ddp_args[@]}"; }

# GPT-2 d12 (124M) on the GPU, on the text the tarball carries (corpus.txt: ember's docs, as
# bytes): it must finish with a finite loss; the detail is its last progress line.
gpt2_corpus() {
  if [ -n "$build_dir" ]; then cat "$here"/../../docs/*.md "$here"/../../README.md; else cat "$here/corpus.txt"; fi
}
gpt2_step() {
  local step="$1"
  shift
  local log="$logs/$step.log" rc corpus="$out_dir/corpus.txt"
  gpt2_corpus >"$corpus"
  run_logged "$log" "$step_limit" "${bin[train_gpt2]}" --device cuda --model d12 --text "$corpus" \
    --eval-batches 2 --sample-tokens 0 "$@"
  rc=$?
  local last
  last="$(grep '^step ' "$log" | tail -n 1 | sed -E 's/ +/ /g' | cut -c 1-150)"
  if [ "$timed_out" -eq 1 ]; then
    res=FAIL
    detail="$(timeout_detail); last: $last"
  elif [ "$rc" -ne 0 ] || ! grep -q '^done: ' "$log"; then
    res=FAIL
    detail="exit code $rc: $(first_error_line "$log" 'error|Error|what\(\)|Abort|fault')"
  else
    res=PASS
    detail="$last"
  fi
}
step_train_gpt2_d12() {
  local steps=30
  [ "$quick" -eq 1 ] && steps=12
  local metrics="$out_dir/gpt2_d12_metrics.prom"
  gpt2_step train_gpt2_d12 --seq 1024 --batch 8 --amp bf16 --steps "$steps" --log-every 10 \
    --eval-every 1000 --metrics-file "$metrics"
  # NVML's figures in the metrics (absent only where libnvidia-ml cannot be loaded).
  cp "$metrics" "$logs/" 2>/dev/null
  [ "$res" = PASS ] && detail="$detail; NVML metrics: $(grep -cE '^ember_gpu_' "$metrics" 2>/dev/null) lines"
}
# The d12 step as one CUDA graph (train_gpt2 --cuda-graph): it replays, and prints the losses of
# the train_gpt2_d12 step's eager run (the same run), whose log this compares with when it ran.
step_train_gpt2_d12_graph() {
  local steps=30
  [ "$quick" -eq 1 ] && steps=12
  gpt2_step train_gpt2_d12_graph --seq 1024 --batch 8 --amp bf16 --steps "$steps" --log-every 10 \
    --eval-every 1000 --cuda-graph
  [ "$res" = PASS ] || return 0
  local graphed eager
  graphed="$(grep -oE '^step +[0-9]+ \| loss [0-9.]+' "$logs/train_gpt2_d12_graph.log")"
  eager="$(grep -soE '^step +[0-9]+ \| loss [0-9.]+' "$logs/train_gpt2_d12.log")"
  check_graph_run "$logs/train_gpt2_d12_graph.log" "$graphed" "$eager" eager \
    "losses differ from train_gpt2_d12's: $(tr '\n' ' ' <<<"$graphed" | cut -c 1-200)"
}
step_train_gpt2_d12_cudnn() {
  local steps=30
  [ "$quick" -eq 1 ] && steps=12
  EMBER_ATTENTION_KERNEL=cudnn gpt2_step train_gpt2_d12_cudnn --seq 1024 --batch 8 --amp bf16 \
    --steps "$steps" --log-every 10 --eval-every 1000
}
# The allocation trace of a GPU run (the CUDA backend's workspaces included), replayed by the
# bench_allocator step with the recorded CPU ones.
step_train_gpt2_trace() {
  mkdir -p "$out_dir/traces"
  gpt2_step train_gpt2_trace --seq 1024 --seq-lengths 256,512,768,1024 --batch 8 --amp bf16 \
    --checkpoint full --steps 8 --log-every 4 --eval-every 1000 \
    --record-allocations "$out_dir/traces/gpt2d12_gpu_varlen_full_bf16.trace.gz"
  [ "$res" = PASS ] || rm -f "$out_dir/traces/gpt2d12_gpu_varlen_full_bf16.trace.gz"
}

# A Chrome trace of two d12 steps on the GPU (profile::Trace: host ranges, and device intervals
# from CUPTI), checked as the CPU's is (tests/examples/check_trace.py), with --device: kernels on
# streams, in order. python3 runs without the carried lib/; train_gpt2 with it.
step_train_gpt2_timeline() {
  local log="$logs/train_gpt2_timeline.log" rc corpus="$out_dir/corpus.txt"
  local script="$here/scripts/check_trace.py"
  [ -n "$build_dir" ] && script="$here/../../tests/examples/check_trace.py"
  gpt2_corpus >"$corpus"
  run_logged "$log" "$step_limit" env -u LD_LIBRARY_PATH python3 "$script" \
    "$out_dir/gpt2_d12_trace.json" --device --top 30 --modules attn,mlp \
    --ops matmul,attention_forward,attention_backward,layer_norm_forward,optimizer_step -- \
    env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "${bin[train_gpt2]}" --device cuda --model d12 \
    --text "$corpus" --seq 1024 --batch 8 --amp bf16 --steps 4 --log-every 2 --eval-every 1000 \
    --sample-tokens 0
  rc=$?
  finish_step "$rc" "$log" 'Error|error|assert|missing|overlap' \
    "$(grep -m 1 'host ranges' "$log" | cut -c 1-150)"
}

# A benchmark: its GPU rows (FILTER), with the ratio tables; DETAIL_PATTERN picks the ratio
# lines that go into the detail.
bench_step() {  # bench_step STEP FILTER PATTERN [MIN_TIME]
  local step="$1" filter="$2" pattern="$3" min_time="0.05"
  [ "$quick" -eq 1 ] && min_time="0.01"
  [ -n "${4:-}" ] && min_time="$4"
  local log="$logs/$step.log" rc
  run_logged "$log" "$step_limit" "${bin[$step]}" "--benchmark_filter=$filter" \
    "--benchmark_min_time=$min_time"
  rc=$?
  # ember's ratio reporter colours its table even into a file: plain text in the log.
  sed -i 's/\x1b\[[0-9;]*m//g' "$log"
  # Rows: the table's lines (a name, then a time); the ratio tables' lines start with spaces.
  local rows errors ratios
  rows="$(grep -cE '^(cuda_|chain_gpu/)[^ ]+ +[0-9.]+ [mun]?s ' "$log")"
  errors="$(grep -c 'ERROR OCCURRED' "$log")"
  # "speed of ember relative to cublas, ..." / "speed of ember's cuda_step_bf16 relative to its
  # cuda_step_f32, ...", then "  <name>  <ratio>" lines: the ones PATTERN picks, shortened.
  ratios="$(awk -v pattern="^($pattern)" '
    /^speed of / {
      for (i = 1; i < NF; i++) if ($i == "to") { ref = $(i + 1) == "its" ? $(i + 2) : $(i + 1); break }
      sub(/,$/, "", ref); next
    }
    /^  / && $1 ~ pattern {
      name = $1; sub(/\/(manual|real)_time$/, "", name); sub(/\/ember\//, "/", name)
      printf "%s%s vs %s %s", sep, name, ref, $2; sep = ", "
    }' "$log")"
  if [ "$timed_out" -eq 1 ]; then
    res=FAIL
    detail="$(timeout_detail) after $rows rows"
  elif [ "$rc" -ne 0 ]; then
    res=FAIL
    detail="exit code $rc after $rows rows: $(first_error_line "$log" 'error|Error|what\(\)')"
  elif [ "$errors" -gt 0 ] || [ "$rows" -eq 0 ]; then
    res=FAIL
    detail="$rows rows, $errors with errors: $(first_error_line "$log" 'ERROR OCCURRED|Failed to match')"
  else
    res=PASS
    detail="$rows rows${ratios:+; speed ratios: $ratios}"
  fi
}
step_bench_matmul() {
  local filter='^cuda_'
  # The names end in /manual_time: the shapes are matched up to their slash.
  [ "$quick" -eq 1 ] && filter='^cuda_.*/(1024x1024x1024|4096x4096x4096)/'
  bench_step bench_matmul "$filter" 'cuda_(f32_tiled|bf16_tiled|bf16_cublaslt)/ember/4096x4096x4096'
}
step_bench_train_step() {
  bench_step bench_train_step '^cuda_step_' 'cuda_step_(bf16|f16)/ember/width:2048/[^ ]*|cuda_step_graph_f32/ember/width:256/[^ ]*'
}
step_bench_elementwise() {
  bench_step bench_elementwise '^chain_gpu/' 'chain_gpu/ember/268435456'
}

# The checkpointed variable-shape traces replayed on the GPU: ember's allocator through the real
# upstreams (bench_allocator --device cuda:0), then PyTorch's own caching allocator with
# expandable segments off and on, next to ember's figures from the same run.
step_bench_allocator() {
  local log="$logs/bench_allocator.log" rc traces=() smallest=()
  local trace_dir="$here/traces" script="$here/reference/replay_trace_torch.py"
  [ -n "$build_dir" ] && trace_dir="$here/../../benchmarks/traces/checkpointed_varlen" &&
    script="$here/../../benchmarks/reference/replay_trace_torch.py"
  shopt -s nullglob
  traces=("$trace_dir"/*.trace.gz "$out_dir"/traces/*.trace.gz)
  shopt -u nullglob
  if [ ${#traces[@]} -eq 0 ]; then
    res=SKIP
    detail="no traces in $trace_dir"
    return 0
  fi
  [ "$quick" -eq 1 ] && traces=("${traces[@]:0:2}") && smallest=(--no-smallest)
  run_logged "$log" "$step_limit" "${bin[bench_allocator]}" --device cuda:0 "${smallest[@]}" \
    $(printf -- '--trace %s ' "${traces[@]}")
  rc=$?
  if [ "$timed_out" -eq 1 ] || [ "$rc" -ne 0 ]; then
    res=FAIL
    detail="bench_allocator --device: exit code $rc: $(first_error_line "$log" 'error|Error|does not complete')"
    return 0
  fi
  local ratios
  ratios="$(awk '/^trace / { name = $2; sub(/.*\//, "", name); sub(/\.trace\.gz$/, "", name) }
                 /reserved \/ requested \(ratio\)/ { printf "%s%s %s", sep, name, $5; sep = ", " }' "$log")"
  res=PASS
  detail="ember reserved/requested: $ratios"
  # PyTorch's allocator on the same GPU (python3 with a CUDA PyTorch; the carried lib/ is not
  # PyTorch's: run without it).
  left=$((step_limit - $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%d", b - a }')))
  if [ "$left" -lt 20 ]; then
    detail="$detail; PyTorch: no time left"
    return 0
  fi
  run_logged "$log" "$left" env -u LD_LIBRARY_PATH EMBER_BENCH_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
    python3 "$script" --bench "${bin[bench_allocator]}" \
    "${smallest[@]}" "${traces[@]}"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    res=FAIL
    detail="$detail; replay_trace_torch.py: exit code $rc"
  elif grep -q 'nothing to compare' "$log"; then
    detail="$detail; PyTorch: $(grep -m 1 'nothing to compare' "$log" | cut -c 21-80)"
  else
    detail="$detail; PyTorch side by side in the log"
  fi
}

# ember against PyTorch on the same GPU, in one run (benchmarks/reference/compare.py): the MLP
# step (eager and CUDA graph) and GPT-2 (eager; torch.compile for d12 bf16 at T = 1024). PyTorch
# runs without the carried lib/, ember's benchmarks with it.
step_torch_reference() {
  local log="$logs/torch_reference.log" rc script="$here/reference/compare.py" min_time=0.3
  [ -n "$build_dir" ] && script="$here/../../benchmarks/reference/compare.py"
  [ "$quick" -eq 1 ] && min_time=0.15
  if ! env -u LD_LIBRARY_PATH python3 -c 'import torch; assert torch.cuda.is_available()' >>"$log" 2>&1; then
    res=SKIP
    detail="no python3 with a CUDA PyTorch"
    return 0
  fi
  local bindir="$here/bin"
  [ -n "$build_dir" ] && bindir="$(dirname "${bin[bench_gpt2]}")"
  run_logged "$log" "$step_limit" env -u LD_LIBRARY_PATH EMBER_BENCH_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" \
    python3 "$script" --device cuda --bin "$bindir" --only train_step,gpt2 --gpt2-models 'small|d12' \
    --compile --min-time "$min_time"
  rc=$?
  finish_step "$rc" "$log" 'Error|error|failed' \
    "$(grep -E 'width:256/.*graph|bf16/d12/T:1024' "$log" | awk '{ printf "%s%s %s", sep, $1, $4; sep = ", " }' | cut -c 1-300)"
}
step_bench_gpt2_trace() {
  # Blocks of 4 steps traced and 4 not, interleaved: a second of them for a steady figure.
  bench_step bench_gpt2 '^cuda_gpt2_trace_overhead' 'cuda_gpt2_trace_overhead' 1
  local log="$logs/bench_gpt2.log"
  [ "$res" = PASS ] && detail="overhead% (counter table): $(awk '/trace_overhead/ && $NF ~ /^[0-9]/ { printf "%s%s %s", sep, $1, $7; sep = ", " }' "$log" | sed 's|/real_time||g')"
}

step_bench_loader() {
  local log="$logs/bench_loader.log" rc
  run_logged "$log" "$step_limit" "${bin[bench_loader]}" --device cuda:0 --steps 100
  rc=$?
  if [ "$timed_out" -eq 1 ] || [ "$rc" -ne 0 ]; then
    res=FAIL
    detail="exit code $rc: $(first_error_line "$log" 'error|Error')"
  else
    res=PASS
    detail="$(grep -E '^  [0-9] ' "$log" | awk '{ printf "%s%s workers %s", sep, $1, $4; sep = ", " }'); $(grep -o 'ratio [0-9.]*' "$log")"
  fi
}

# compute-sanitizer TOOL over a command: no errors, and the command itself succeeds.
sanitizer_step() {
  local step="$1" tool="$2"
  shift 2
  local log="$logs/$step.log" rc
  run_logged "$log" "$step_limit" "$sanitizer" --tool "$tool" --error-exitcode 99 \
    --print-limit 20 "$@"
  rc=$?
  local errors what=""
  errors="$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1 | grep -oE '[0-9]+')"
  if grep -q -- '--gtest_filter' <<<"$*"; then
    gtest_counts "$log"
    what="; $gtest_detail"
  fi
  if [ "$timed_out" -eq 1 ]; then
    res=FAIL
    detail="$(timeout_detail)$what"
  elif [ -z "$errors" ]; then
    res=FAIL
    detail="exit code $rc, no ERROR SUMMARY: $(first_error_line "$log" '[Ee]rror')"
  elif [ "$errors" -gt 0 ]; then
    res=FAIL
    detail="$errors errors; first: $(grep -E '^========= [A-Z]' "$log" |
      grep -vE 'COMPUTE-SANITIZER|SUMMARY|Target application' | head -n 1 | cut -c 11-130)$what"
  elif [ "$rc" -ne 0 ]; then
    res=FAIL
    detail="0 errors, but the program's exit code is $rc$what"
  else
    res=PASS
    detail="0 errors$what"
  fi
}
step_memcheck() {
  local filter='*cuda0*'
  [ "$quick" -eq 1 ] && filter="$kernel_filter"
  # Every block in an allocation of its own and of its exact size, so that memcheck sees an
  # access past a tensor's end (the cache would hide it inside a larger segment).
  EMBER_ALLOC_CONF=debug_guard:true sanitizer_step memcheck memcheck \
    "${bin[ember_tests]}" "--gtest_filter=$filter"
}
step_racecheck() {
  EMBER_ATTENTION_KERNEL=simt sanitizer_step racecheck racecheck "${bin[ember_tests]}" \
    "--gtest_filter=$kernel_filter"
}
step_synccheck() {
  EMBER_ATTENTION_KERNEL=simt sanitizer_step synccheck synccheck "${bin[ember_tests]}" \
    "--gtest_filter=$kernel_filter"
}
step_initcheck() {
  local n=100
  [ "$quick" -eq 1 ] && n=20
  EMBER_ALLOC_CONF=debug_guard:true sanitizer_step initcheck initcheck \
    "${bin[train_mlp]}" --device cuda --steps "$n" --log-every "$n" --points 200 --width 64
}

# Each step's own timeout (seconds) and the binary it needs.
own_timeout() {
  local full quick_s
  case "$1" in
    binaries_start|gpu) full=90 quick_s=90 ;;
    device_cases) full=240 quick_s=180 ;;
    train_gpt2_*) full=120 quick_s=90 ;;
    train_*) full=90 quick_s=45 ;;
    torch_reference) full=240 quick_s=200 ;;
    bench_matmul) full=150 quick_s=60 ;;
    bench_allocator) full=180 quick_s=60 ;;
    bench_*) full=90 quick_s=45 ;;
    memcheck) full=240 quick_s=120 ;;
    racecheck) full=180 quick_s=90 ;;
    synccheck|initcheck) full=120 quick_s=60 ;;
  esac
  if [ "$quick" -eq 1 ]; then echo "$quick_s"; else echo "$full"; fi
}
needs_binary() {
  case "$1" in
    device_cases|memcheck|racecheck|synccheck) echo ember_tests ;;
    train_mlp_*|initcheck) echo train_mlp ;;
    torch_reference) echo bench_gpt2 ;;
    bench_gpt2_trace) echo bench_gpt2 ;;
    train_resmlp_*) echo train_resmlp ;;
    train_ddp) echo train_ddp ;;
    train_gpt2_*) echo train_gpt2 ;;
    bench_*) echo "$1" ;;
  esac
}

record() {  # record STEP RESULT SECONDS DETAIL
  results+=("$1|$2|$3|$4")
  [ "$2" = FAIL ] && failures=$((failures + 1))
  printf '%-24s %-4s %6s s  %s\n' "$1" "$2" "$3" "$4"
}

{
  echo "ember GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)$([ "$quick" -eq 1 ] && echo ', --quick')"
  if [ -n "$manifest" ] && [ -f "$manifest" ]; then
    echo "tarball: $(manifest_value ember), $(manifest_value commit), sm_$(manifest_value cuda_architectures), nvcc $(manifest_value nvcc)"
  elif [ -n "$build_dir" ]; then
    echo "build tree: $build_dir"
  fi
  [ ${#cuda_dirs_added[@]} -gt 0 ] && echo "CUDA libraries from: ${cuda_dirs_added[*]}"
  [ ${#cuda_libs_missing[@]} -gt 0 ] && echo "CUDA libraries not found: ${cuda_libs_missing[*]}"
  echo "compute-sanitizer: ${sanitizer:-not found}"
  echo "logs: $logs"
} | tee "$out_dir/header.txt"
echo

for step in "${steps[@]}"; do
  selected "$step" || continue
  res="" detail=""
  step_own="$(own_timeout "$step")"
  left=$((budget - $(elapsed)))
  needs="$(needs_binary "$step")"
  if [ "$step" != binaries_start ] && [ "$step" != gpu ] && [ "$gpu_ok" -eq 0 ]; then
    record "$step" SKIP 0.0 "$gpu_why"
    continue
  fi
  if [ -n "$needs" ] && [ -z "${bin[$needs]:-}" ]; then
    record "$step" SKIP 0.0 "$needs is not in this package"
    continue
  fi
  case "$step" in
    memcheck|racecheck|synccheck|initcheck)
      if [ -z "$sanitizer" ]; then
        record "$step" SKIP 0.0 "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
        continue
      fi ;;
  esac
  # The two checks that decide the rest always run, with their own timeouts.
  if [ "$step" = binaries_start ] || [ "$step" = gpu ]; then
    left="$step_own"
  elif [ "$left" -lt 15 ]; then
    record "$step" SKIP 0.0 "no time left of the --budget of $budget s"
    continue
  fi
  step_limit=$((step_own < left ? step_own : left))
  echo "... $step (timeout $step_limit s)"
  t0="$(now)"
  case "$step" in
    train_mlp_graph_*) step_train_mlp_graph "$step" ;;
    train_mlp_*) step_train_mlp "$step" ;;
    train_resmlp_graph) step_train_resmlp_graph ;;
    train_resmlp_*) step_train_resmlp "$step" ;;
    *) "step_$step" ;;
  esac
  record "$step" "$res" "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')" "$detail"
done

# ---- the summary ------------------------------------------------------------------------
passed=0 skipped=0
for r in "${results[@]}"; do
  case "$r" in *"|PASS|"*) passed=$((passed + 1)) ;; *"|SKIP|"*) skipped=$((skipped + 1)) ;; esac
done
{
  cat "$out_dir/header.txt"
  echo
  printf '%-24s %-6s %8s  %s\n' step result seconds detail
  printf '%-24s %-6s %8s  %s\n' ------------------------ ------ -------- ------
  for r in "${results[@]}"; do
    IFS='|' read -r s result seconds d <<<"$r"
    printf '%-24s %-6s %8s  %s\n' "$s" "$result" "$seconds" "$d"
  done
  echo
  echo "$passed passed, $failures failed, $skipped skipped in $(elapsed) s$(
    [ "$failures" -eq 0 ] && echo ': OK' || echo ': FAILED')"
} >"$out_dir/summary.txt"
rm -f "$out_dir/header.txt"
echo
cat "$out_dir/summary.txt"
echo "summary: $out_dir/summary.txt"
[ "$failures" -eq 0 ]
