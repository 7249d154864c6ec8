#!/usr/bin/env bash
# keel on one NVIDIA GPU, in one go: conformance of the CUDA plugin at full
# level, keel bench on it, the same measurements made directly on CUDA
# (bench/gpu/cuda_ref.cu) for the ratios, and Fashion-MNIST training.
#
#   bash bench/gpu/run.sh OUT_DIR
#
# Meant for a machine with the CUDA toolkit at /usr/local/cuda, a GPU, and
# no network or -dev packages. keel itself comes from bench/gpu/bundle.tar.xz
# (made beforehand on a development machine by bench/gpu/bundle.sh: keel,
# its plugins and every library they need, glibc included, plus the
# Fashion-MNIST files); the direct-CUDA anchor is built here with nvcc.
# Without the bundle the script builds keel from source with meson when
# the machine has what that needs, and says so when it does not.
#
# Writes into OUT_DIR: run.log (everything), nvidia-smi.txt,
# cuda_ref.json, devices.json, fallbacks.txt, conform.json + conform.xml +
# conform.log, bench.json + bench.log, mnist.log, profile.log,
# summary.md (the targets and where keel stands). Steps that fail are
# recorded and the script goes on; the exit status is 0 only when every
# step ran and conformance passed.
set -uo pipefail
if [ $# -lt 1 ]; then sed -n '2,22p' "$0"; exit 2; fi
out=$1
mkdir -p "$out" && out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
exec > >(tee -a "$out/run.log") 2>&1
status=0
t_start=$(date +%s)
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
fail() { echo "!! $*"; status=1; }

step "machine"
date -u
if command -v nvidia-smi >/dev/null; then
  nvidia-smi | tee "$out/nvidia-smi.txt"
  nvidia-smi -q >>"$out/nvidia-smi.txt" 2>&1
else
  fail "nvidia-smi not found"
fi
"$cuda/bin/nvcc" --version | tail -2

step "direct CUDA anchor (cuda_ref)"
ref=$out/cuda_ref
if "$cuda/bin/nvcc" -O3 -std=c++17 \
     -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
     -gencode arch=compute_90,code=compute_90 \
     -o "$ref" "$here/cuda_ref.cu" -lcublas; then
  timeout 180 "$ref" "$out/cuda_ref.json" || fail "cuda_ref failed"
else
  fail "cuda_ref did not build"
fi

step "keel"
run_keel=()
if [ -f "$here/bundle.tar.xz" ]; then
  kb=$(mktemp -d)/keel-bundle
  tar -C "$(dirname "$kb")" -xJf "$here/bundle.tar.xz" || fail "bundle did not unpack"
  echo "bundle of commit $(cat "$kb/COMMIT")"
  keel_bin=$kb/bin/keel mnist_bin=$kb/bin/keel-mnist data=$kb/data
  libpath=$kb/lib:$cuda/lib64:$cuda/targets/x86_64-linux/lib
  loader=$(ls "$kb"/lib/ld-linux-x86-64.so.* 2>/dev/null | head -1)
  export KEEL_PLUGIN_PATH=$kb/plugins KEEL_PLUGIN_DEFAULT_PATHS=0
  # The bundled glibc and loader, so that the host distribution's glibc
  # version does not matter.
  run_keel=("$loader" --library-path "$libpath")
elif command -v meson >/dev/null && command -v ninja >/dev/null; then
  b=$root/build-gpu-src
  if meson setup "$b" "$root" --buildtype=release -Dtests=false \
       -Dplugin_cuda=enabled -Dplugin_cuda_kernels=enabled \
       -Dplugin_cuda_archs=90 && ninja -C "$b"; then
    keel_bin=$b/core/cli/keel mnist_bin=$b/examples/mnist/keel-mnist
    data=${KEEL_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
  else
    fail "no bench/gpu/bundle.tar.xz and keel does not build here (it needs OpenBLAS, libyaml, CUnit, jansson, zlib, libcrypto and Google Benchmark's -dev packages); run bench/gpu/bundle.sh on a development machine first"
  fi
else
  fail "no bench/gpu/bundle.tar.xz and no meson/ninja to build keel"
fi

if [ -n "${keel_bin:-}" ]; then
  k() { "${run_keel[@]}" "$keel_bin" "$@"; }
  step "keel devices"
  k devices || fail "keel devices failed"
  k devices --json >"$out/devices.json" || true
  k devices --fallbacks >"$out/fallbacks.txt" 2>&1 || true

  step "keel conform --plugin cuda --level full"
  timeout 300 "${run_keel[@]}" "$keel_bin" conform --plugin cuda --level full \
    --junit "$out/conform.xml" --report "$out/conform.json" \
    >"$out/conform.log" 2>&1
  rc=$?
  tail -40 "$out/conform.log"
  [ $rc -eq 0 ] || fail "keel conform exit status $rc"

  step "keel bench --plugin cuda"
  timeout 240 "${run_keel[@]}" "$keel_bin" bench --plugin cuda --large \
    --min-time 0.2 --format json --out "$out/bench.json" \
    --filter '^(matmul/(f32|bf16)/square/(4096|8192)|memory/d2d/1GiB|paired/d2d_vs_memcpy/256MiB|elementwise/add/(f32|bf16)/(16M|64M)|e2e/lenet_train_step/adam)' \
    >"$out/bench.log" 2>&1 || fail "keel bench failed"
  cat "$out/bench.log"

  step "Fashion-MNIST, 3 epochs on gpu:0"
  (cd "$out" && timeout 240 "${run_keel[@]}" "$mnist_bin" --device gpu:0 \
     --epochs 3 --data "$data" --checkpoint "$out/mnist.safetensors") \
    >"$out/mnist.log" 2>&1 || fail "keel-mnist failed"
  tr '\r' '\n' <"$out/mnist.log" | grep -v '^epoch.*batch' | tail -8
  rm -f "$out/mnist.safetensors"

  step "per-op profile, 100 training steps on gpu:0 (KEEL_PROFILE=sync)"
  (cd "$out" && KEEL_PROFILE=sync timeout 60 "${run_keel[@]}" "$mnist_bin" \
     --device gpu:0 --epochs 1 --limit 6400 --data "$data" \
     --checkpoint "$out/profile.safetensors") >"$out/profile.log" 2>&1 ||
    fail "profiled run failed"
  grep -A30 '^op ' "$out/profile.log" | head -30
  rm -f "$out/profile.safetensors"
fi

step "summary"
if command -v python3 >/dev/null; then
  python3 "$here/summarize.py" "$out" | tee "$out/summary.md" ||
    fail "summary failed"
else
  echo "python3 not found: no summary.md (the JSON files hold the numbers)"
fi
echo "run.sh: $(( $(date +%s) - t_start )) s, status $status"
exit $status
