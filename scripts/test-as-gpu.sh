#!/usr/bin/env bash
# The whole test suite with every default device planning as a discrete GPU would: in a
# scratch git worktree of HEAD, DeviceOptions::default() gets `gpu_plans: true`,
# `parallelism: Some(256)` (the discrete-GPU estimate of Caps::parallelism) and
# `disable_subgroups: true` (a GPU's subgroups are not 8 lanes, so the sg8 kernels stay off).
# Every test then runs the kernels a real GPU runs on its own shapes, where the normal suite
# runs them only on the conformance tests' `gpu_plans` devices. Without a GPU at hand it finds
# what a GPU run of the suite would (a precision test past its bound on the split-k tiles, a
# reference that assumed the CPU's summation order). It tests the committed HEAD, not
# uncommitted edits.
#
# Expected failures, which come from the emulation and not the kernels: tests gated on the
# adapter's type (it stays `DeviceType::Cpu`), the cooperative-matrix tile's tests (they need
# subgroups), and tests that compare with a device opened with `gpu_plans: false`.
#
# Usage: bash scripts/test-as-gpu.sh [cargo test args...]   (e.g. `--test conv_runtime`)
# WT (a path for the worktree, default a temp dir) and CARGO_TARGET_DIR (default
# target-as-gpu/ beside target/; a copy of target/ with `cp -al` saves a full build) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=
if [ -z "${WT:-}" ]; then
  tmp=$(mktemp -d)
fi
wt=${WT:-$tmp/wt}
git worktree add --detach "$wt" HEAD >/dev/null
trap 'git -C "$root" worktree remove --force "$wt"; git -C "$root" worktree prune; [ -z "$tmp" ] || rm -rf "$tmp"' EXIT
opts="$wt/src/runtime/options.rs"
# The three lines of the Default impl; each must occur once, so a change there fails loudly.
for line in 'disable_subgroups: false,' 'gpu_plans: false,' 'parallelism: None,'; do
  n=$(grep -c "^            $line\$" "$opts" || true)
  if [ "$n" != 1 ]; then
    echo "test-as-gpu.sh: expected one '$line' in DeviceOptions::default(), found $n" >&2
    exit 1
  fi
done
sed -i \
  -e 's/^            disable_subgroups: false,$/            disable_subgroups: true,/' \
  -e 's/^            gpu_plans: false,$/            gpu_plans: true,/' \
  -e 's/^            parallelism: None,$/            parallelism: Some(256),/' \
  "$opts"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target-as-gpu}
cd "$wt"
cargo test --no-fail-fast "$@"
