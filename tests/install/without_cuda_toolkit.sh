#!/bin/sh
# Runs a command as if the CUDA toolkit were not installed: in a private mount namespace, an empty
# tmpfs covers the toolkit's directory (and so every link into it, /usr/local/cuda and the
# headers and libraries linked from /usr/local/include and /usr/local/lib). Needs root; exits 77
# (the test's skip code) where a mount namespace cannot be made.
# Usage: without_cuda_toolkit.sh <toolkit dir> <command> [args...]
set -eu
toolkit=$(readlink -f "$1")
shift
if ! unshare -m sh -c "mount -t tmpfs none '$toolkit'" 2>/dev/null; then
  echo "without_cuda_toolkit: cannot hide $toolkit in a mount namespace (needs root): skipped"
  exit 77
fi
exec unshare -m sh -c 'mount -t tmpfs none "$0" && exec "$@"' "$toolkit" "$@"
