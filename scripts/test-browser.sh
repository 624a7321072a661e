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
cargo test --target wasm32-unknown-unknown --test browser -- --nocapture
t2=$(date +%s)

bash web/build.sh
python3 web/page_test.py
t3=$(date +%s)

echo "test-browser.sh: setup $((t1 - t0)) s, browser tests $((t2 - t1)) s," \
  "demo page build + test $((t3 - t2)) s, total $((t3 - t0)) s"
