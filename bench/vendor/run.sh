#!/usr/bin/env bash
# keel on one Ascend NPU or Cambricon MLU, in one go: build, the plugin's
# conformance at full level, keel bench on it against the CPU plugin, and
# Fashion-MNIST training on <plugin>:0 (with the CPU fallback for the ops
# the plugin has no kernel for; fallbacks.txt and mnist-fallbacks.txt say
# which).
#
#   bench/vendor/run.sh npu|mlu [OUT_DIR]  (default bench/results/<plugin>-<date>)
#
# Meant for a machine with the vendor's SDK and driver installed (CANN:
# libascendcl.so, libopapi.so, libhccl.so; Neuware: libcnrt.so,
# libcnnl.so, libcncl.so) on the library path, and keel's build dependencies. The
# plugins load the SDK at run time, so the build itself needs no SDK.
# Writes into OUT_DIR: run.log, devices.txt, fallbacks.txt, conform.json,
# conform.xml, conform.log, bench-<plugin>.json, bench-cpu.json, mnist.log.
# Exit status 0 only when every step passed. Nothing of this has run yet:
# no such machine has been available.
set -uo pipefail
plugin=${1:-}
case "$plugin" in
  npu|mlu) ;;
  *) echo "usage: bench/vendor/run.sh npu|mlu [OUT_DIR]" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${2:-$root/bench/results/$plugin-$(date +%Y-%m-%d)}
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
status=0 t_start=$(date +%s)
step() { echo; echo "== $*"; }
fail() { echo "FAIL: $*"; status=1; }

step "device"
if [ "$plugin" = npu ]; then
  command -v npu-smi >/dev/null && npu-smi info || true
else
  command -v cnmon >/dev/null && cnmon || true
fi

step "build"
b=$root/build-$plugin-run
meson setup "$b" "$root" --buildtype=release -Dtests=false \
  -Dplugin_$plugin=enabled -Dplugin_cuda=disabled -Dplugin_hip=disabled &&
  ninja -C "$b" || { fail "keel did not build"; exit 1; }
keel=$b/core/cli/keel mnist=$b/examples/mnist/keel-mnist
data=${KEEL_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
export KEEL_PLUGIN_PATH=$b/plugins/$plugin:$b/plugins/cpu KEEL_PLUGIN_DEFAULT_PATHS=0

step "keel devices"
"$keel" devices | tee "$out/devices.txt" || fail "keel devices failed"
"$keel" devices --fallbacks >"$out/fallbacks.txt" 2>&1 || true
n=$("$keel" devices --json 2>/dev/null | python3 -c \
  "import json,sys; d=json.load(sys.stdin); print(sum(p.get('device_count',0) for p in d.get('plugins',[]) if p.get('name')=='$plugin'))" 2>/dev/null || echo 0)
[ "${n:-0}" -gt 0 ] || { fail "the $plugin plugin found no device (devices.txt says why)"; exit 1; }

# The MLU plugin withholds the kernels whose CNNL enum values are not
# verified (docs/mlu-plugin.md) unless asked: conformance is where they are
# checked against the CPU plugin, so it asks. Training below does not.
step "keel conform --plugin $plugin --level full"
[ "$plugin" = mlu ] && export KEEL_MLU_UNVERIFIED_KERNELS=1
timeout 900 "$keel" conform --plugin "$plugin" --level full \
  --junit "$out/conform.xml" --report "$out/conform.json" >"$out/conform.log" 2>&1
rc=$?
tail -40 "$out/conform.log"
[ $rc -eq 0 ] || fail "keel conform exit status $rc"
unset KEEL_MLU_UNVERIFIED_KERNELS

step "keel bench: $plugin against cpu, rounds alternating"
filter='^(elementwise/(add|relu)/f32/16M|e2e/lenet_train_step/adam)'
for round in 1 2 3; do
  for p in "$plugin" cpu; do
    timeout 240 "$keel" bench --plugin "$p" --large --min-time 0.2 \
      --format json --out "$out/bench-$p-$round.json" --filter "$filter" \
      >>"$out/bench-$p.log" 2>&1 || fail "keel bench ($p) failed"
  done
done
tail -20 "$out/bench-$plugin.log"

step "Fashion-MNIST, 3 epochs on $plugin:0"
(cd "$out" && timeout 1200 "$mnist" --device "$plugin:0" --epochs 3 \
   --data "$data" --checkpoint "$out/mnist.safetensors") >"$out/mnist.log" 2>&1 ||
  fail "keel-mnist failed"
tr '\r' '\n' <"$out/mnist.log" | grep -v '^epoch.*batch' | tail -8
rm -f "$out/mnist.safetensors"

echo "run.sh $plugin: $(( $(date +%s) - t_start )) s, status $status"
exit $status
