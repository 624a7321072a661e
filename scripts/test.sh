#!/usr/bin/env bash
# The whole test suite. On a machine without a GPU it first installs Mesa's lavapipe (Debian,
# root); f16 cases are skipped, and said to be, when the adapter lacks SHADER_F16.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-lavapipe.sh

skip=()
set +e
cargo run --quiet --example adapter_info -- --require-f16
status=$?
set -e
case $status in
  0) ;;
  3) echo "test.sh: the adapter lacks SHADER_F16: f16 cases are SKIPPED (filtered out below)"
     skip=(--skip f16) ;;
  *) echo "test.sh: no usable wgpu adapter (status $status)" >&2; exit 1 ;;
esac

cargo test "$@" -- "${skip[@]}"
