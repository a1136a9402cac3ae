#!/bin/sh
# Runs a command with a small tmpfs mounted at a directory, in a private mount namespace, and the
# directory in EMBER_TEST_TMPFS: a disk that fills up, for the saved-state tests. Needs root; prints
# EMBER_SKIP and exits 0 where a mount namespace cannot be made (the test's skip expression).
# Usage: on_small_tmpfs.sh <dir> <size, e.g. 912k> <command> [args...]
set -eu
dir=$1
size=$2
shift 2
mkdir -p "$dir"
if ! unshare -m sh -c "mount -t tmpfs -o size=$size tmpfs '$dir'" 2>/dev/null; then
  echo "EMBER_SKIP: cannot mount a tmpfs in a mount namespace here (needs root)"
  exit 0
fi
export EMBER_TEST_TMPFS="$dir"
exec unshare -m sh -c 'mount -t tmpfs -o size="$1" tmpfs "$0" && shift && exec "$@"' "$dir" "$size" "$@"
