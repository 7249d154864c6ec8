#!/usr/bin/env bash
# Build keel with the CUDA plugin here and pack what bench/gpu/run.sh needs
# on a GPU machine that has the CUDA toolkit but none of Debian's -dev
# packages and no network: bench/gpu/bundle.tar.xz (git-ignored).
#
#   bash bench/gpu/bundle.sh [BUILD_DIR]      (default build-gpu)
#
# Contents: bin/ (keel with conform and bench, keel-mnist), lib/ (libkeel
# and every shared library they load that is not part of the CUDA toolkit,
# glibc and its loader included, so the binaries run whatever the GPU
# machine's distribution is), plugins/ (cpu, cuda: its front and its
# backend, with SASS for sm_80 and sm_90 plus PTX), data/ (the
# Fashion-MNIST IDX files). Binaries are stripped. cuBLAS, NCCL and the
# driver come from the GPU machine (/usr/local/cuda/lib64, the backend's
# rpath).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build-gpu}
case $build in /*) ;; *) build=$root/$build ;; esac
out=$root/bench/gpu/bundle.tar.xz
data=${KEEL_MNIST_DATA:-/usr/share/datasets/fashion-mnist}

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$root" --buildtype=release -Dtests=false \
    -Dplugin_cuda=enabled -Dplugin_cuda_kernels=enabled \
    -Dplugin_cuda_archs=80,90
fi
ninja -C "$build" core/cli/keel examples/mnist/keel-mnist \
  plugins/cpu/libkeel-cpu.so plugins/cuda/libkeel-cuda.so \
  plugins/cuda/keel-cuda-backend.so

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/keel-bundle
mkdir -p "$b/bin" "$b/lib" "$b/plugins" "$b/data"
cp "$build/core/cli/keel" "$build/examples/mnist/keel-mnist" "$b/bin/"
# The CUDA plugin is a front and the backend it loads from its own folder
# (docs/cuda-plugin.md, "Front and backend"): both go to plugins/.
cp "$build/plugins/cpu/libkeel-cpu.so" "$build/plugins/cuda/libkeel-cuda.so" \
  "$build/plugins/cuda/keel-cuda-backend.so" "$b/plugins/"
cp -L "$build/core/libkeel.so.0" "$b/lib/"
# The CPU plugin dlopens its BLAS (plugins/cpu/kernels/blas.c): not in ldd's
# list, so bundled by name with what it needs in turn.
blas=$(ldconfig -p | awk '$1 == "libopenblas.so.0" && !f {print $NF; f = 1}')
[ -n "$blas" ] || { echo "bundle: libopenblas.so.0 not found" >&2; exit 1; }
cp -L "$blas" "$b/lib/libopenblas.so.0"
for f in "$b/bin/"* "$b/plugins/"* "$b/lib/libopenblas.so.0"; do
  ldd "$f" | awk '/=>/ {print $3} $1 ~ /ld-linux/ {print $1}'
done | sort -u | while read -r lib; do
  case $lib in ""|/usr/local/cuda*|*/libkeel.so*|not) continue ;; esac
  [ -e "$lib" ] && cp -L "$lib" "$b/lib/"
done
strip --strip-unneeded "$b/bin/"* "$b/plugins/"* "$b/lib/libkeel.so.0" 2>/dev/null || true
for f in train-images-idx3-ubyte train-labels-idx1-ubyte \
         t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  cp "$data/$f.gz" "$b/data/"
done
git -C "$root" rev-parse HEAD >"$b/COMMIT" 2>/dev/null || echo unknown >"$b/COMMIT"
tar -C "$stage" -cJf "$out" keel-bundle
size=$(stat -c %s "$out")
echo "bundle: $out, $((size / 1024 / 1024)) MiB ($(ls "$b/lib" | wc -l) libraries)"
if [ "$size" -gt $((60 * 1024 * 1024)) ]; then
  echo "bundle: larger than 60 MiB; it may not travel to the GPU machine" >&2
  exit 1
fi
