#!/usr/bin/env bash
# Builds the demo page's wasm module: the web_demo example (web/demo.rs) for
# wasm32-unknown-unknown, then wasm-bindgen --target web into web/pkg (served with web/).
# Needs the wasm32 target and wasm-bindgen-cli of the crate's wasm-bindgen version
# (scripts/test-browser.sh installs both). WEB_PROFILE=release for an optimized build;
# CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${WEB_PROFILE:-dev}
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
cargo build --quiet --profile "$profile" --target wasm32-unknown-unknown --example web_demo
wasm-bindgen --target web --no-typescript --out-dir web/pkg --out-name web_demo \
  "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/$dir/examples/web_demo.wasm"
echo "web/build.sh: web/pkg/web_demo.js and web_demo_bg.wasm ($(du -h web/pkg/web_demo_bg.wasm | cut -f1))"
