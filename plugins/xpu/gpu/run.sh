#!/usr/bin/env bash
# keel on an Intel GPU through the Level Zero plugin (libkeel-xpu.so,
# plugin "levelzero", device type "xpu"), in one go: driver check, keel
# devices, conformance at full level, keel bench, Fashion-MNIST on xpu:0.
#
#   bash plugins/xpu/gpu/run.sh [BUILD_DIR] [OUT_DIR]
#
# BUILD_DIR: a built keel tree (default: ./b, else ./build); without one the
# script builds keel with meson into ./build-xpu (needs the -dev packages,
# libze-dev, clang-14, llvm-spirv-14, spirv-tools). OUT_DIR defaults to
# bench/results/xpu-<UTC date>. Needs Intel's compute runtime
# (intel-level-zero-gpu, or Intel's own level-zero + intel-opencl packages)
# and read/write access to /dev/dri/renderD* (the 'render' group).
#
# Writes into OUT_DIR: run.log (everything), machine.txt, devices.txt,
# devices.json, conform.json + conform.xml + conform.log, bench.json +
# bench.log, mnist.log, SKIPPED.txt (every step that did not run, and why).
# A failed step is recorded and the script goes on; the exit status is 0
# only when every step ran and conformance passed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
case "${1:-}" in -h|--help) sed -n '2,19p' "$0"; exit 0 ;; esac
bdir=${1:-}
out=${2:-$root/bench/results/xpu-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out" && out=$(cd "$out" && pwd)
exec > >(tee -a "$out/run.log") 2>&1
status=0
: >"$out/SKIPPED.txt"
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
fail() { echo "!! $*"; status=1; }
skip() {
  echo "!! SKIPPED: $*"
  echo "SKIPPED: $*" >>"$out/SKIPPED.txt"
  status=1
}

step "machine"
{ date -u; uname -a; lspci 2>/dev/null | grep -iE 'vga|display|3d' || true; } \
  | tee "$out/machine.txt"

step "Level Zero driver"
have_driver=1
if ls /dev/dri/renderD* >/dev/null 2>&1; then
  ls -l /dev/dri/renderD* | tee -a "$out/machine.txt"
  for n in /dev/dri/renderD*; do
    [ -r "$n" ] && [ -w "$n" ] ||
      echo "!! $n is not readable and writable by $(id -un) (add the user to the 'render' group)"
  done
else
  echo "!! no /dev/dri/renderD* node: no GPU driver loaded (i915 or xe)"
  have_driver=0
fi
if ldconfig -p 2>/dev/null | grep -q 'libze_intel_gpu.so'; then
  ldconfig -p | grep -E 'libze_(loader|intel_gpu)' | tee -a "$out/machine.txt"
else
  echo "!! libze_intel_gpu.so (Intel's Level Zero driver, package intel-level-zero-gpu) not found by ldconfig"
  have_driver=0
fi

step "keel build"
if [ -z "$bdir" ]; then
  for d in "$root/b" "$root/build"; do
    [ -x "$d/core/cli/keel" ] && [ -f "$d/plugins/xpu/libkeel-xpu.so" ] && { bdir=$d; break; }
  done
fi
if [ -z "$bdir" ]; then
  bdir=$root/build-xpu
  if command -v meson >/dev/null && command -v ninja >/dev/null; then
    { [ -d "$bdir" ] || meson setup "$bdir" "$root" --buildtype=release \
        -Dplugin_xpu=enabled -Dplugin_cuda=disabled; } &&
      ninja -C "$bdir" || fail "keel did not build in $bdir"
  else
    fail "no built tree and no meson/ninja to build one"
  fi
fi
bdir=$(cd "$bdir" 2>/dev/null && pwd || echo "$bdir")
keel=$bdir/core/cli/keel
plugin=$bdir/plugins/xpu/libkeel-xpu.so
mnist=$bdir/examples/mnist/keel-mnist
export KEEL_PLUGIN_PATH=$bdir/plugins/xpu:$bdir/plugins/cpu
export KEEL_PLUGIN_DEFAULT_PATHS=0
if [ ! -x "$keel" ] || [ ! -f "$plugin" ]; then
  skip "every keel step: $keel or $plugin is missing"
  echo "run.sh: status $status"; exit $status
fi
git -C "$root" log -1 --format='commit %H %s' 2>/dev/null | tee -a "$out/machine.txt"

step "keel devices (the zeInit probe)"
"$keel" devices | tee "$out/devices.txt" || fail "keel devices failed"
"$keel" devices --json >"$out/devices.json" 2>/dev/null || true
ndev=$(grep -cE '^  xpu:[0-9]+' "$out/devices.txt" || true)
if [ "${ndev:-0}" -eq 0 ]; then
  echo "!! the levelzero plugin found no device; its reason:"
  grep -A0 'status .*0 devices' "$out/devices.txt" || true
  [ $have_driver -eq 1 ] || echo "!! (expected: the driver checks above failed)"
  skip "keel conform, keel bench, keel-mnist: levelzero has 0 devices"
  echo; echo "run.sh: status $status (nothing ran on a GPU)"
  cat "$out/SKIPPED.txt"
  exit $status
fi

step "keel conform --plugin $plugin --level full"
timeout 1200 "$keel" conform --plugin "$plugin" --level full \
  --junit "$out/conform.xml" --report "$out/conform.json" \
  >"$out/conform.log" 2>&1
rc=$?
tail -60 "$out/conform.log"
[ $rc -eq 0 ] || fail "keel conform exit status $rc (see conform.log)"

step "keel bench --plugin levelzero"
timeout 900 "$keel" bench --plugin levelzero --min-time 0.2 --format json \
  --out "$out/bench.json" >"$out/bench.log" 2>&1 || fail "keel bench failed"
cat "$out/bench.log"

step "Fashion-MNIST, 3 epochs on xpu:0"
data=${KEEL_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
if [ ! -x "$mnist" ]; then
  skip "keel-mnist: $mnist was not built"
elif [ ! -d "$data" ]; then
  skip "keel-mnist: no Fashion-MNIST files in $data (set KEEL_MNIST_DATA)"
else
  (cd "$out" && timeout 900 "$mnist" --device xpu:0 --epochs 3 --data "$data" \
     --checkpoint "$out/mnist.safetensors") >"$out/mnist.log" 2>&1 ||
    fail "keel-mnist failed (see mnist.log)"
  tr '\r' '\n' <"$out/mnist.log" | grep -v '^epoch.*batch' | tail -8
  rm -f "$out/mnist.safetensors"
fi

step "summary"
if [ -s "$out/SKIPPED.txt" ]; then
  echo "!! steps that did NOT run:"; cat "$out/SKIPPED.txt"
else
  echo "every step ran"
fi
echo "outputs in $out"
echo "run.sh: status $status"
exit $status
