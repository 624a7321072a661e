#!/usr/bin/env bash
# The demo: a grouped convolution, batch norm and an LSTM forward and backward on the GPU, each
# checked against a CPU reference, with timings and the runtime's counters. On a machine with no
# Vulkan driver (no GPU) it first installs Mesa's lavapipe (Debian, root), as scripts/test.sh
# does; with a real GPU driver it installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-lavapipe.sh
# No --quiet: on a fresh machine the first build takes minutes, and cargo's progress shows it
# is not hung.
cargo run --release --example quickstart
