#!/usr/bin/env bash
# The main job: install what is missing, build keel, list the devices and
# run the short device demo on every virtual CPU device.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
keel_install_deps

BUILD=${KEEL_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD"
fi
ninja -C "$BUILD"

export KEEL_CPU_DEVICES=${KEEL_CPU_DEVICES:-4}
echo
echo "== keel devices"
"$BUILD/core/cli/keel" devices
echo
echo "== examples/devices (select by name, copy, all-reduce)"
"$BUILD/examples/devices/keel-example-devices"
echo; echo "== keel conform (CPU plugin, smoke level)"; "$BUILD/core/cli/keel" conform --plugin cpu --level smoke
echo; echo "== pip install . (the Python package, with libkeel and the plugins, into .venv)"
keel_install_python_package -Dplugin_cuda_kernels=disabled \
  -Dplugin_hip_kernels=disabled
echo; echo "== keel from Python, as installed (no PYTHONPATH, from an empty folder)"
"$KEEL_VENV/bin/python" python/tests/installed.py
