#!/usr/bin/env bash
# ember's two entry points on a fresh Debian machine (run as root to install packages):
#   ./ember.sh train   install what is missing, build (release), run train_mlp
#   ./ember.sh test    install what is missing, build (release), run the whole test suite
# Extra arguments after `train` go to train_mlp; after `test`, to ctest.
set -euo pipefail
cd "$(dirname "$0")"

# Debian packages ember builds with. The CUDA toolkit is optional (EMBER_CUDA=AUTO).
packages=(cmake ninja-build g++ ccache pkg-config libfmt-dev zlib1g-dev libgtest-dev libgmock-dev
          libbenchmark-dev libboost-context-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin python3
          libdnnl-dev libpng-dev nlohmann-json3-dev libxxhash-dev libcpp-httplib-dev
          fortunes)  # fortunes: train_gpt2's default corpus, for the example only

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "ember: missing packages: ${missing[*]}" >&2
    echo "ember: run as root, or install them: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "ember: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# SASS checks (ptxas_report) need cuobjdump and nvdisasm, which some CUDA toolkit installs
# lack; NVIDIA publishes them as PyPI wheels. Best effort: without them the SASS checks skip.
install_cuda_tools() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  [ -x /usr/local/cuda/bin/cuobjdump ] && [ -x /usr/local/cuda/bin/nvdisasm ] && return 0
  [ -x .tools/cuda/nvidia/cu13/bin/nvdisasm ] && return 0
  echo "ember: installing cuobjdump and nvdisasm into .tools/cuda (PyPI: nvidia-cuda-*)"
  python3 -m pip install -q --disable-pip-version-check --target .tools/cuda \
    nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm 2>/dev/null ||
    echo "ember: could not install them; ptxas_report will skip its SASS checks" >&2
}

# cuDNN's fused attention (AttentionKernel::cudnn) is reached through the cuDNN frontend's
# header-only graph API, which NVIDIA publishes on PyPI (nvidia-cudnn-frontend: its include/).
# Best effort: without it the CUDA build has no cuDNN attention (ember's own kernels run).
install_cudnn_frontend() {
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  [ -f .tools/cudnn_frontend/include/cudnn_frontend.h ] && return 0
  echo "ember: installing the cuDNN frontend headers into .tools/cudnn_frontend (PyPI: nvidia-cudnn-frontend)"
  # Its headers only: the wheel of one version, whatever this machine's Python is.
  python3 -m pip install -q --disable-pip-version-check --no-deps --target .tools/cudnn_frontend \
    --only-binary=:all: --python-version 3.11 --implementation cp \
    nvidia-cudnn-frontend==1.32.0 2>/dev/null ||
    echo "ember: could not install them; the CUDA build will not have cuDNN attention" >&2
}

# promtool, Prometheus' linter, checks the metrics test's scrape. It comes only with Debian's
# prometheus package, which also installs and starts a Prometheus server: its binary is unpacked
# into .tools/prometheus instead of installing the package. Best effort: without it the test
# checks the text with its own parser only.
install_promtool() {
  [ -x .tools/prometheus/usr/bin/promtool ] && return 0
  local tmp
  tmp="$(mktemp -d)"
  mkdir -p .tools/prometheus
  if (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null) &&
     dpkg-deb -x "$tmp"/prometheus_*.deb .tools/prometheus 2>/dev/null; then
    echo "ember: unpacked promtool into .tools/prometheus (Debian's prometheus package)"
  else
    echo "ember: could not fetch Debian's prometheus package; the metrics test lints without promtool" >&2
  fi
  rm -rf "$tmp"
}

# OpenMP threads that spin while waiting make every op ~30x slower when other
# processes share the cores (measured: train_mlp next to a compiler); passive
# waiting costs ~20% on an idle machine and avoids that cliff.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

build() {
  install_cuda_tools
  install_cudnn_frontend
  cmake --preset release
  cmake --build --preset release --parallel "$(nproc)"
}

case "${1:-}" in
  train)
    shift
    install_missing
    build
    ./build/release/examples/train_mlp "$@"
    ;;
  test)
    shift
    install_missing
    install_promtool
    build
    ctest --preset release "$@"
    ;;
  *)
    echo "usage: ./ember.sh train [train_mlp options] | ./ember.sh test [ctest options]" >&2
    exit 2
    ;;
esac
