#!/usr/bin/env bash
# keel on one AMD GPU or Hygon DCU, in one go: the HIP plugin's
# conformance at full level, keel bench on it (GEMMs twice: on rocBLAS and
# on the plugin's own kernel, KEEL_GPU_GEMM=native, rounds alternating, so
# the ratio comes from one run), and Fashion-MNIST training on hip:0.
#
#   bench/gpu/run-hip.sh [OUT_DIR]     (default bench/results/hip-<date>)
#
# Meant for a machine with ROCm or Hygon's DTK (hipcc, the HIP runtime,
# rocPRIM headers; rocBLAS and RCCL are used when they load) and keel's
# build dependencies. Builds keel here for the GPU's own target
# (KEEL_HIP_ARCHS, default: what rocm_agent_enumerator reports).
# Writes into OUT_DIR: run.log, devices.txt, fallbacks.txt, conform.json,
# conform.xml, conform.log, bench-rocblas.json, bench-native.json,
# mnist.log. Exit status 0 only when every step passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/bench/results/hip-$(date +%Y-%m-%d)}
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
status=0 t_start=$(date +%s)
step() { echo; echo "== $*"; }
fail() { echo "FAIL: $*"; status=1; }

step "device"
if command -v rocm-smi >/dev/null; then rocm-smi || true; fi
archs=${KEEL_HIP_ARCHS:-$(rocm_agent_enumerator 2>/dev/null | grep -v '^gfx000$' | sort -u | paste -sd, -)}
[ -n "$archs" ] || { fail "no AMD GPU target found (set KEEL_HIP_ARCHS, e.g. gfx906)"; exit 1; }
echo "targets: $archs"

step "build"
b=$root/build-hip-src
meson setup "$b" "$root" --buildtype=release -Dtests=false \
  -Dplugin_hip=enabled -Dplugin_hip_kernels=enabled \
  -Dplugin_hip_archs="$archs" -Dplugin_cuda=disabled && ninja -C "$b" ||
  { fail "keel did not build"; exit 1; }
keel=$b/core/cli/keel mnist=$b/examples/mnist/keel-mnist
data=${KEEL_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
export KEEL_PLUGIN_PATH=$b/plugins/hip:$b/plugins/cpu KEEL_PLUGIN_DEFAULT_PATHS=0

step "keel devices"
"$keel" devices | tee "$out/devices.txt" || fail "keel devices failed"
"$keel" devices --fallbacks >"$out/fallbacks.txt" 2>&1 || true

step "keel conform --plugin hip --level full"
timeout 600 "$keel" conform --plugin hip --level full \
  --junit "$out/conform.xml" --report "$out/conform.json" >"$out/conform.log" 2>&1
rc=$?
tail -40 "$out/conform.log"
[ $rc -eq 0 ] || fail "keel conform exit status $rc"

step "keel bench --plugin hip: GEMM on rocBLAS, then on the plugin kernel"
filter='^(matmul/(f32|bf16)/square/(1024|4096)|elementwise/add/f32/16M|e2e/lenet_train_step/adam)'
for round in 1 2 3; do
  for gemm in rocblas native; do
    env $([ $gemm = native ] && echo KEEL_GPU_GEMM=native) \
      timeout 240 "$keel" bench --plugin hip --large --min-time 0.2 \
      --format json --out "$out/bench-$gemm-$round.json" --filter "$filter" \
      >>"$out/bench-$gemm.log" 2>&1 || fail "keel bench ($gemm) failed"
  done
done
tail -20 "$out/bench-rocblas.log"
tail -20 "$out/bench-native.log"

step "Fashion-MNIST, 3 epochs on hip:0"
(cd "$out" && KEEL_STRICT=1 timeout 600 "$mnist" --device hip:0 --epochs 3 \
   --data "$data" --checkpoint "$out/mnist.safetensors") >"$out/mnist.log" 2>&1 ||
  fail "keel-mnist failed"
tr '\r' '\n' <"$out/mnist.log" | grep -v '^epoch.*batch' | tail -8
rm -f "$out/mnist.safetensors"

echo "run-hip.sh: $(( $(date +%s) - t_start )) s, status $status"
exit $status
