#!/usr/bin/env bash
# The browser part of CI: the browser tests (tests/browser, wasm32 + WebGPU in headless
# Chromium) and the demo page's end-to-end test (web/page_test.py). Installs what is missing
# (Debian, root): chromium and chromium-driver, the wasm32 target, and wasm-bindgen-cli of
# exactly the crate's wasm-bindgen version (skipped when `wasm-bindgen --version` matches).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
t0=$(date +%s)

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "test-browser.sh: installing chromium and chromium-driver"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
rustup target add wasm32-unknown-unknown >/dev/null 2>&1

# wasm-bindgen-cli must match the wasm-bindgen crate exactly (Cargo.toml pins it with `=`).
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$want" ]; then
  echo "test-browser.sh: installing wasm-bindgen-cli $want (have: ${have:-none}; takes minutes)"
  cargo install --quiet wasm-bindgen-cli --version "=$want"
fi
t1=$(date +%s)

CHROMEDRIVER=$(command -v chromedriver)
export CHROMEDRIVER
# wasm-bindgen-test has no run-time skip: a test whose adapter lacks a feature returns early
# and the runner counts it as "ok". Each such test prints "<name>: SKIPPED, the adapter (...)
# lacks ..."; recount them here so the summary says how many were really skipped.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --target wasm32-unknown-unknown --test browser -- --nocapture 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -Eo 'test result: [A-Za-z]+\. [0-9]+ passed' "$log" | grep -Eo '[0-9]+' | tail -1 || true)
skipped=$(grep -Ec '^[A-Za-z0-9_]+: SKIPPED' "$log" || true)
echo "test-browser.sh: browser tests: $(( ${passed:-0} - skipped )) passed, $skipped skipped" \
  "for a missing adapter feature (listed above with the adapter's name)"
[ "$status" -eq 0 ] || exit "$status"
t2=$(date +%s)

bash web/build.sh
python3 web/page_test.py
t3=$(date +%s)

echo "test-browser.sh: setup $((t1 - t0)) s, browser tests $((t2 - t1)) s," \
  "demo page build + test $((t3 - t2)) s, total $((t3 - t0)) s"
