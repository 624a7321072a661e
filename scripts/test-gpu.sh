#!/usr/bin/env bash
# The whole suite on whatever GPU adapter is present, hunting intermittent failures: every test
# binary (the conformance suite included) runs REPS times with THREADS test threads under a
# watchdog that names the tests still running when it fires, then the doc tests; one summary
# line per binary and run. Exit status 0 only when every run of every binary passed.
#
#   scripts/test-gpu.sh                  build (release) and run here; doc tests too
#   scripts/test-gpu.sh --bundle DIR     build here and put stripped test binaries in DIR, to
#                                        carry to a GPU machine without a Rust toolchain
#   scripts/test-gpu.sh --run DIR        run the binaries of a bundle (no cargo needed)
#
# Settings (environment): REPS (3), THREADS (8), WATCHDOG (seconds per binary run, 300), LOGS
# (the folder every run's log is kept in; default a fresh temporary one),
# FILTER (passed to every binary as its test-name filter). On a GPU machine that has the
# NVIDIA driver but no Vulkan loader, carry the loader debs in .gl/ (../shared/gpu/README.md):
# this script unpacks them and points the loader at the NVIDIA ICD before running anything.
set -uo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-3}
THREADS=${THREADS:-8}
WATCHDOG=${WATCHDOG:-300}
FILTER=${FILTER:-}
mode=local
dir=
case "${1:-}" in
  --bundle) mode=bundle; dir=${2:?--bundle needs a directory} ;;
  --run) mode=run; dir=${2:?--run needs a directory} ;;
  "") ;;
  *) echo "usage: $0 [--bundle DIR | --run DIR]" >&2; exit 2 ;;
esac

# The test executables of a release build, one path a line (cargo's JSON messages).
build_binaries() {
  cargo test --release --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])
'
}

if [ "$mode" = bundle ]; then
  mkdir -p "$dir"
  build_binaries | while read -r exe; do
    name=$(basename "$exe" | sed 's/-[0-9a-f]\{16\}$//')
    cp "$exe" "$dir/$name" && strip "$dir/$name" 2>/dev/null
    echo "bundled $name"
  done
  exit 0
fi

# A GPU machine without a Vulkan loader: unpack the carried one (as ../shared/gpu/on-device.sh).
if ls .gl/*.deb >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  if ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1 &&
     [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  fi
  export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

if [ "$mode" = run ]; then
  mapfile -t bins < <(find "$dir" -maxdepth 1 -type f -perm -u+x | sort)
else
  mapfile -t bins < <(build_binaries | sort)
fi
[ ${#bins[@]} -gt 0 ] || { echo "test-gpu.sh: no test binaries found" >&2; exit 1; }

# Runs EXE with ARGS, its output in LOG, killed after WATCHDOG seconds (exit 137 then, as
# `timeout -s KILL`). Before the kill it writes LOG.hang: each thread's name (the test it
# runs), state and kernel wait channel, and the CPU ticks it used over one second, so a hang
# reads as a deadlock (every thread asleep in a futex), a wait on the GPU (polling threads
# using CPU) or a GPU that stopped (nvidia-smi's utilization beside them).
run_watched() {
  local exe=$1 log=$2
  shift 2
  "$exe" "$@" >"$log" 2>&1 &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$WATCHDOG" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    return $?
  fi
  {
    local t ticks0=()
    for t in /proc/"$pid"/task/*; do ticks0+=("$(awk '{print $14 + $15}' "$t/stat" 2>/dev/null)"); done
    sleep 1
    local i=0
    for t in /proc/"$pid"/task/*; do
      echo "thread $(basename "$t") '$(cat "$t/comm" 2>/dev/null)': state $(awk '{print $3}' "$t/stat" 2>/dev/null), wchan $(cat "$t/wchan" 2>/dev/null), cpu ticks in 1 s $(( $(awk '{print $14 + $15}' "$t/stat" 2>/dev/null || echo 0) - ${ticks0[$i]:-0} ))"
      i=$((i + 1))
    done
    command -v nvidia-smi >/dev/null &&
      nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader | sed 's/^/gpu: /'
  } >"$log.hang" 2>&1
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 137
}

logs=${LOGS:-$(mktemp -d)}
mkdir -p "$logs"
failed=0
runs=0
for exe in "${bins[@]}"; do
  name=$(basename "$exe" | sed 's/-[0-9a-f]\{16\}$//')
  # Every test the binary holds, to name the ones a hung run never finished.
  "$exe" --list --format terse $FILTER 2>/dev/null | sed -n 's/: test$//p' | sort >"$logs/$name.all"
  total=$(wc -l <"$logs/$name.all")
  [ "$total" -gt 0 ] || continue
  for rep in $(seq 1 "$REPS"); do
    runs=$((runs + 1))
    log="$logs/$name.$rep.log"
    start=$(date +%s)
    run_watched "$exe" "$log" --test-threads="$THREADS" $FILTER
    rc=$?
    secs=$(( $(date +%s) - start ))
    done_n=$(grep -cE '^test .* \.\.\. (ok|FAILED|ignored)' "$log")
    if [ $rc -eq 137 ]; then
      failed=$((failed + 1))
      grep -oE '^test .* \.\.\. (ok|FAILED|ignored)' "$log" | sed -E 's/^test (.*) \.\.\. .*/\1/' |
        sort >"$log.done"
      hung=$(comm -23 "$logs/$name.all" "$log.done" | head -20 | tr '\n' ' ')
      echo "test-gpu: $name run $rep/$REPS HUNG after ${secs} s ($done_n/$total finished); still running: $hung"
      sed 's/^/    /' "$log.hang" 2>/dev/null
    elif [ $rc -ne 0 ]; then
      failed=$((failed + 1))
      echo "test-gpu: $name run $rep/$REPS FAILED in ${secs} s (exit $rc, $done_n/$total finished):"
      grep -E '^test .* FAILED$|panicked at' "$log" | head -20 | sed 's/^/    /'
    else
      echo "test-gpu: $name run $rep/$REPS ok in ${secs} s ($total tests)"
    fi
  done
done

if [ "$mode" = local ]; then
  runs=$((runs + 1))
  if timeout -s KILL "$WATCHDOG" cargo test --release --doc >"$logs/doc.log" 2>&1; then
    echo "test-gpu: doc tests ok"
  else
    failed=$((failed + 1))
    echo "test-gpu: doc tests FAILED:"
    grep -E 'FAILED|panicked' "$logs/doc.log" | head -20 | sed 's/^/    /'
  fi
else
  echo "test-gpu: doc tests not run (no cargo in --run mode)"
fi

echo "test-gpu: $((runs - failed)) passed, $failed failed (binary runs; logs in $logs)"
[ $failed -eq 0 ]
