#!/usr/bin/env bash
# Builds the demo page and serves web/ on http://localhost:${PORT:-8000}/ (WebGPU needs a
# secure context: localhost is one). Chrome/Edge 113+ have WebGPU on by default on Windows,
# macOS and ChromeOS; on Linux start Chrome with --enable-unsafe-webgpu.
set -euo pipefail
cd "$(dirname "$0")/.."
bash web/build.sh
echo "serving http://localhost:${PORT:-8000}/ (Ctrl-C stops)"
exec python3 -m http.server --bind 127.0.0.1 --directory web "${PORT:-8000}"
