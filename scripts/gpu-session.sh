#!/usr/bin/env bash
# One GPU session's measurements in one device call (docs/BENCHMARKS.md, "Running them on a GPU
# machine": the device time is short and
# every start costs minutes, so everything is built here and run there in one go).
#
#   scripts/gpu-session.sh prepare    here: the Vulkan loader debs into .gl/, and into .gpu/ the
#                                     stripped, xz-compressed bench binary, the test binaries of
#                                     the GPU kernels' suites, ../shared/gpu/on-device.sh and the
#                                     PyTorch twins; prints what `carry` must name
#   scripts/gpu-session.sh prepare-ab PATCH
#                                     here, after `prepare`: the bench built again with PATCH (a
#                                     `git diff` of the plan change to time) applied, into
#                                     .gpu/kernels_b; the working tree is restored after
#   scripts/gpu-session.sh prepare-suite
#                                     here: every test binary, compressed, into .gpuall/
#   scripts/gpu-session.sh run suite  there (carry [".gl", ".gpuall"]): the whole suite through
#                                     scripts/test-gpu.sh, its logs in $OUT/suite-logs.tgz
#   scripts/gpu-session.sh run ab CASE...
#                                     there: both bench binaries (without and with the patch)
#                                     alternately, A B A B, on CASE..., each in a fresh process;
#                                     ms per case side by side in $OUT/ab.log (without a patched
#                                     build, B is the bench run with AB_B_FLAGS, e.g.
#                                     --parallelism=512 or --memory-hints=dedicated). Every run
#                                     but `run suite` logs the GPU's clocks beside the case lines
#                                     ($OUT/clocks.log). A plan change is
#                                     kept only if it wins here: changes timed on reasoning alone
#                                     made four of eight GPU plans slower once
#   scripts/gpu-session.sh run [tests|bench|checks|exec CMD...]
#                                     there (device `run`, carry [".gl", ".gpu"], timeout_s 600):
#                                     the GPU kernels' tests on the real adapter (conformance of
#                                     GEMM, convolution, RNN, attention, elementwise, cooperative
#                                     matrices; the binaries side by side, at most TEST_TIMEOUT s
#                                     each), then `kernels --bench --no-first --short gpu/` and the
#                                     same shapes in PyTorch CUDA, joined by
#                                     scripts/gpu_compare.py into compare.md; every log also
#                                     under $OUT. `tests` or `bench` alone split it over two calls;
#                                     `checks` times CHECKS_CASES under each ShaderChecks setting;
#                                     `exec` runs CMD with the loader set up.
#
# Settings (environment): TESTS (test binaries to bundle, default below), BENCH (bench filters,
# default gpu/ and the small cases the GPU issues quote), BENCH_FLAGS (default --no-first --short), TEST_FILTER (test-name filter for the
# run, default all), TEST_TIMEOUT (seconds per test binary, default 100), CHECKS_CASES (the
# cases of `run checks`), CHECKS (its settings, default "full loops div none"), BENCH_TIMEOUT
# (seconds, default 240), SKIP_TORCH (set: `run bench` skips PyTorch's twins). A bundled test
# binary that is missing counts as a failure (rc=missing).
set -uo pipefail
cd "$(dirname "$0")/.."

TESTS=${TESTS:-"conformance elementwise_gpu_plans attention gemm_runtime conv_runtime"}
# The gpu/ family and the small cases the GPU issues quote (their figures against burn's and
# PyTorch's), so one `run` measures both.
BENCH=${BENCH:-"gpu/ gemm_1024 bgemm gemm_splitk conv2d conv2d_grouped conv2d_depthwise conv2d_wgrad batchnorm_train batchnorm_infer lstm_seq gru_seq lstm_seq_backward lstm_train_step cnn_train_step embedding_backward tiny_ops"}
TEST_FILTER=${TEST_FILTER:-}
TEST_TIMEOUT=${TEST_TIMEOUT:-100}
CHECKS_CASES=${CHECKS_CASES:-"gpu/gemm_4096 gpu/gemm_4096_f16 gpu/conv2d gpu/attention_fwd_f16 gpu/lstm_h512_t100 gpu/map_2e26"}
BENCH_FLAGS=${BENCH_FLAGS---no-first --short}

prepare() {
  set -e
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.gl/' "$exclude" 2>/dev/null || echo /.gl/ >>"$exclude"
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo /.gpu/ >>"$exclude"
  if ! ls .gl/*.deb >/dev/null 2>&1; then
    mkdir -p .gl /tmp/amd64/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    # shellcheck disable=SC2086
    apt-get $o update -qq
    # shellcheck disable=SC2086
    (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  fi
  rm -rf .gpu && mkdir -p .gpu
  cargo bench --bench kernels --no-run 2>/dev/null
  local bench
  bench=$(ls -t target/release/deps/kernels-* | grep -v '\.d$' | head -1)
  cp "$bench" .gpu/kernels && strip .gpu/kernels
  for t in $TESTS; do
    cargo test --release --test "$t" --no-run 2>/dev/null
    local exe
    exe=$(ls -t target/release/deps/"$t"-* | grep -v '\.d$' | head -1)
    cp "$exe" ".gpu/$t" && strip ".gpu/$t"
  done
  xz -T0 -6 .gpu/*
  cp ../shared/gpu/on-device.sh scripts/bench_gpu_torch.py scripts/bench_attention_torch.py \
    scripts/gpu_compare.py .gpu/
  du -sh .gl .gpu
  echo 'device run: carry [".gl", ".gpu"], command: bash scripts/gpu-session.sh run'
}

# Each line read, after the time as nvidia-smi's timestamp writes it (clocks.log's two streams).
stamp() {
  local l
  while IFS= read -r l; do printf '%s, %s\n' "$(date '+%Y/%m/%d %H:%M:%S.%3N')" "$l"; done
}

run() {
  local out=${OUT:-/tmp/gpu-session}
  mkdir -p "$out"
  for f in .gpu/*.xz; do xz -d -f "$f"; done
  chmod +x .gpu/kernels 2>/dev/null
  # The loader and the NVIDIA ICD, as ../shared/gpu/on-device.sh does.
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  if ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  fi
  export WGPU_BACKEND=vulkan PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader |
    tee "$out/gpu.txt"
  # The GPU's clocks, temperature, power and clock-event reasons every 0.5 s, beside the bench's
  # case lines stamped into the same file: tells a slowdown late in a long run that the clocks
  # explain from one the pool or the allocator does (docs/BENCHMARKS.md). Older drivers name
  # the reasons clocks_throttle_reasons; without either, the plain fields.
  local q=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw r
  for r in clocks_event_reasons.active clocks_throttle_reasons.active; do
    if nvidia-smi --query-gpu=$q,$r --format=csv >/dev/null 2>&1; then
      q=$q,$r
      break
    fi
  done
  # Both writers append, so neither overwrites the other's lines.
  : >"$out/clocks.log"
  nvidia-smi --query-gpu=$q --format=csv -lms 500 >>"$out/clocks.log" 2>&1 &
  local smi=$! status
  measure "$@"
  status=$?
  kill "$smi" 2>/dev/null
  return $status
}

# run's measurements (run starts and stops the clock log around them).
measure() {
  local out=${OUT:-/tmp/gpu-session}
  local status=0 what=${1:-all}
  # `run ab CASE...`: the bench without (A) and with (B) prepare-ab's patch, alternately; with
  # no patched build, B is the same bench with AB_B_FLAGS (say --memory-hints=dedicated).
  if [ "$what" = ab ]; then
    shift
    local bin_b=.gpu/kernels_b
    [ -f "$bin_b" ] || bin_b=.gpu/kernels
    chmod +x .gpu/kernels "$bin_b"
    for round in 1 2; do
      for v in A B; do
        local bin=.gpu/kernels flags=
        [ "$v" = B ] && bin=$bin_b flags=${AB_B_FLAGS:-}
        # shellcheck disable=SC2086
        timeout "${BENCH_TIMEOUT:-240}" "$bin" --bench $BENCH_FLAGS $flags "$@" 2>&1 |
          sed -n "s/^case=/$v$round case=/p" | tee -a "$out/ab.log" >(stamp >>"$out/clocks.log")
      done
    done
    return
  fi
  # `run exec CMD ARGS...`: any command (a one-off binary carried in .gpu/) with the loader set.
  if [ "$what" = exec ]; then
    shift
    for f in .gpu/*; do [ -f "$f" ] && chmod +x "$f"; done
    "$@"
    return
  fi
  # 1. Correctness on the real adapter first: its figures mean nothing if a kernel is wrong.
  [ "$what" = bench ] || [ "$what" = checks ] && TESTS=
  # The suites run side by side (16 cores; correctness only, nothing timed yet). Waited for
  # by pid: a bare `wait` would also wait for run's clock logger, which never ends.
  local pids=()
  for t in $TESTS; do
    [ -x ".gpu/$t" ] || chmod +x ".gpu/$t" 2>/dev/null || continue
    # shellcheck disable=SC2086
    (timeout "$TEST_TIMEOUT" ".gpu/$t" --test-threads 4 $TEST_FILTER >"$out/test-$t.log" 2>&1
      echo $? >"$out/rc-$t") &
    pids+=($!)
  done
  [ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
  for t in $TESTS; do
    local rc
    rc=$(cat "$out/rc-$t" 2>/dev/null || echo missing)
    echo "tests $t: rc=$rc $(grep -E '^test result' "$out/test-$t.log" | tail -1)"
    grep -E '^test .* FAILED|panicked' "$out/test-$t.log" | head -20
    [ "$rc" = 0 ] || status=1
    # One log for all: at most 8 files come back from a device call.
    { echo "=== $t: rc=$rc"; cat "$out/test-$t.log"; } >>"$out/tests.log"
    rm -f "$out/rc-$t" "$out/test-$t.log"
  done
  [ "$what" = tests ] && return $status
  # What the shader runtime checks cost: the same cases under each ShaderChecks setting.
  if [ "$what" = checks ]; then
    for c in ${CHECKS:-full loops div none}; do
      # shellcheck disable=SC2086
      timeout 120 .gpu/kernels --bench --no-first --short --checks=$c $CHECKS_CASES 2>&1 |
        sed "s/^case=/checks=$c case=/" | tee -a "$out/checks.log"
    done
    return $status
  fi
  # 2. The bench's GPU cases, then PyTorch's twins on the same GPU.
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-240}" .gpu/kernels --bench $BENCH_FLAGS $BENCH 2>&1 |
    tee "$out/bench.log" >(stamp >>"$out/clocks.log")
  [ -n "${SKIP_TORCH:-}" ] && return $status
  timeout 120 python3 .gpu/bench_gpu_torch.py 2>&1 | tee "$out/torch.log"
  timeout 90 python3 .gpu/bench_attention_torch.py 2>&1 | tee "$out/torch_attention.log"
  # 3. Both side by side, the table docs/BENCHMARKS.md keeps.
  python3 .gpu/gpu_compare.py "$out/bench.log" "$out/torch.log" "$out/torch_attention.log" \
    --gpu "$(cat "$out/gpu.txt")" | tee "$out/compare.md"
  return $status
}

# The bench built with PATCH applied, into .gpu/kernels_b.xz (after `prepare`), so `run ab`
# times a plan change against the plan it replaces in one call. The patch is reverted
# whatever happens, leaving the tree as it was.
prepare_ab() {
  set -e
  local patch=${1:?usage: $0 prepare-ab PATCH}
  [ -f .gpu/kernels.xz ] || { echo "run \`$0 prepare\` first" >&2; exit 2; }
  git apply --check "$patch"
  git apply "$patch"
  # shellcheck disable=SC2064
  trap "git apply -R '$patch'" EXIT
  cargo bench --bench kernels --no-run 2>/dev/null
  local bench
  bench=$(ls -t target/release/deps/kernels-* | grep -v '\.d$' | head -1)
  cp "$bench" .gpu/kernels_b && strip .gpu/kernels_b
  xz -T0 -6 -f .gpu/kernels_b
  du -sh .gpu
  echo 'device run: carry [".gl", ".gpu"], command: bash scripts/gpu-session.sh run ab CASE...'
}

# Every test binary (scripts/test-gpu.sh's bundle, xz-compressed, about 46 MB) into .gpuall/,
# for `run suite`: carry [".gl", ".gpuall"] (not .gpu: both together pass the 64 MiB a call
# may carry).
prepare_suite() {
  set -e
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  grep -qx '/.gpuall/' "$exclude" 2>/dev/null || echo /.gpuall/ >>"$exclude"
  rm -rf .gpuall
  bash scripts/test-gpu.sh --bundle .gpuall >/dev/null
  # Tests that need no GPU (docs, imports, shader translation, the wasm32 suite).
  rm -f .gpuall/docs .gpuall/imports .gpuall/shaders .gpuall/browser
  xz -T0 -6 .gpuall/*
  du -sh .gpuall
  echo 'device run: carry [".gl", ".gpuall"], command: bash scripts/gpu-session.sh run suite'
}

# The whole suite on the GPU (REPS, THREADS, WATCHDOG as scripts/test-gpu.sh takes them; FILTER
# too), every run's log packed into $OUT/suite-logs.tgz: the summary alone cannot tell a hang
# from a failure's cause.
run_suite() {
  local out=${OUT:-/tmp/gpu-session}
  mkdir -p "$out"
  for f in .gpuall/*.xz; do xz -d -f "$f"; done
  chmod +x .gpuall/*
  local logs=/tmp/suite-logs status
  LOGS=$logs bash scripts/test-gpu.sh --run .gpuall 2>&1 | tee "$out/suite.log"
  status=${PIPESTATUS[0]}
  tar czf "$out/suite-logs.tgz" -C "$logs" .
  return "$status"
}

case "${1:-}" in
  prepare) prepare ;;
  prepare-ab)
    shift
    prepare_ab "$@"
    ;;
  prepare-suite) prepare_suite ;;
  run)
    shift
    if [ "${1:-}" = suite ]; then run_suite; else run "$@"; fi
    ;;
  *) echo "usage: $0 prepare | prepare-ab PATCH | prepare-suite | run [tests|bench|checks|ab CASE...|exec CMD...|suite]" >&2; exit 2 ;;
esac
