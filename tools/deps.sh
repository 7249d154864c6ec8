#!/usr/bin/env bash
# Install what keel's build and tests need, when it is missing:
#   - the Debian packages below (apt-get);
#   - the project's Python environment, .venv/ at the top of the source
#     tree (a venv of Debian's /usr/bin/python3): paddlepaddle and numpy,
#     the reference the parity suite compares keel with, html5lib for the
#     report checks, and PyTorch for the side-by-side benchmarks only when
#     asked (KEEL_WITH_TORCH=1; the PyPI wheel pulls several GB).
# Sourced by main.sh and test.sh; safe to run on its own:
#     bash tools/deps.sh                    # Debian packages + .venv
#     KEEL_WITH_TORCH=1 bash tools/deps.sh  # ... and PyTorch in .venv
# Tests never install anything: they use .venv/bin/python, and the parity
# suite reports SKIP (and tools/test.sh fails) when it cannot import Paddle.
set -euo pipefail

KEEL_DEBIAN_PACKAGES=(
  build-essential pkg-config meson ninja-build
  libopenblas-dev libyaml-dev libcunit1-dev libbenchmark-dev
  libjansson-dev libssl-dev zlib1g-dev
  valgrind dataset-fashion-mnist
  python3 python3-venv
  # The Python package's extension module (python/keel) is built against
  # Debian's interpreter, the one .venv is made from.
  python3-dev
  # pip install . (meson-python) sets the installed extension's RPATH
  # with patchelf.
  patchelf
  # OpenCL plugin: headers, ICD loader, PoCL (the OpenCL device CI runs
  # on), CLBlast (its GEMMs), clinfo (to see what the ICDs offer).
  opencl-c-headers ocl-icd-opencl-dev pocl-opencl-icd libclblast-dev clinfo
  # Level Zero (xpu) plugin: headers and loader; its kernels are compiled
  # to SPIR-V by clang and llvm-spirv and checked by spirv-val.
  libze-dev clang-14 llvm-spirv-14 spirv-tools
  # HIP plugin: the HIP runtime and headers, hipcc (kernels for gfx906 and
  # gfx90a) and rocPRIM (sorting, header only).
  hipcc libamdhip64-dev librocprim-dev
  # CPU plugin: SLEEF, the vectorised float32 math of gelu, log, log1p,
  # sin and cos at the avx2 and avx512 levels.
  libsleef-dev
  # ONNX export and import: protobuf-c and its code generator, over the
  # onnx.proto schema libonnx-dev installs.
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev
  # Data-parallel training across processes: Open MPI launches the ranks
  # (mpirun), exchanges the communicator ids, and carries the cpu
  # plugin's collectives between processes.
  openmpi-bin libopenmpi-dev
  # keel report's pages are checked in a real browser (headless Chromium
  # over the DevTools protocol; tools/check_report.py).
  chromium
)

KEEL_SOURCE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KEEL_VENV="$KEEL_SOURCE_ROOT/.venv"
KEEL_PADDLE_VERSION=3.3.1
# What the parity suite imports. numpy is unpinned: pip resolves it
# together with paddlepaddle's own requirement on it.
# html5lib: the HTML5 parser that checks keel report's pages for parse
# errors (tools/check_report.py).
# onnx, onnxruntime: the ONNX tests build models with the one and run
# keel's exports in the other (tests/onnx/check_onnx.py).
# pytest: the Python package's tests (python/tests).
# meson-python, meson, ninja: the build backend of `pip install .`
# (pyproject.toml), used without build isolation so that no download
# happens at install time.
# pip >= 23.1: repeated --config-settings keys (several meson options).
KEEL_PYTHON_PACKAGES=("paddlepaddle==$KEEL_PADDLE_VERSION" numpy html5lib
                      onnx onnxruntime pytest meson-python meson ninja
                      "pip>=23.1")

keel_install_debian() {
  local missing=() p
  for p in "${KEEL_DEBIAN_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "keel: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# True when the venv's python imports every module named.
keel_venv_has() {
  [ -x "$KEEL_VENV/bin/python" ] && "$KEEL_VENV/bin/python" -c "import $1" >/dev/null 2>&1
}

keel_venv_paddle_ok() {
  [ -x "$KEEL_VENV/bin/python" ] && "$KEEL_VENV/bin/python" - "$KEEL_PADDLE_VERSION" <<'EOF' >/dev/null 2>&1
import sys
import numpy, paddle, html5lib, onnx, onnxruntime, pytest, mesonpy, pip
pip_ok = tuple(int(x) for x in pip.__version__.split(".")[:2]) >= (23, 1)
sys.exit(0 if paddle.__version__ == sys.argv[1] and pip_ok else 1)
EOF
}

# Create .venv (once) and install the Python anchors into it. A failure is
# reported and returned, never hidden: the parity suite then SKIPs and
# tools/test.sh fails with the command to run.
keel_install_python() {
  if [ ! -x "$KEEL_VENV/bin/python" ]; then
    echo "keel: creating the Python environment $KEEL_VENV (/usr/bin/python3 -m venv)"
    # Debian's interpreter on purpose: 'python3' on PATH may be a pyenv
    # shim or another installation.
    /usr/bin/python3 -m venv "$KEEL_VENV" || {
      echo "keel: ERROR: /usr/bin/python3 -m venv $KEEL_VENV failed (is python3-venv installed?)" >&2
      rm -rf "$KEEL_VENV"
      return 1
    }
  fi
  if ! keel_venv_paddle_ok; then
    echo "keel: installing ${KEEL_PYTHON_PACKAGES[*]} into $KEEL_VENV (a first install downloads about 200 MB)"
    "$KEEL_VENV/bin/python" -m pip install --quiet "${KEEL_PYTHON_PACKAGES[@]}" || {
      echo "keel: ERROR: pip could not install ${KEEL_PYTHON_PACKAGES[*]} into $KEEL_VENV;" \
           "the parity suite will SKIP until 'bash tools/deps.sh' succeeds" >&2
      return 1
    }
    keel_venv_paddle_ok || {
      echo "keel: ERROR: $KEEL_VENV/bin/python still cannot import paddle $KEEL_PADDLE_VERSION" >&2
      return 1
    }
  fi
  if [ "${KEEL_WITH_TORCH:-0}" = "1" ] && ! keel_venv_has torch; then
    echo "keel: KEEL_WITH_TORCH=1: installing torch into $KEEL_VENV (several GB)"
    "$KEEL_VENV/bin/python" -m pip install --quiet torch || {
      echo "keel: ERROR: pip could not install torch into $KEEL_VENV" >&2
      return 1
    }
  fi
}

# pip install . of the source tree into .venv: the Python package with
# libkeel and the plugins inside it (pyproject.toml, docs/python.md). The
# build lives in build-wheel/ and is incremental; extra arguments are
# meson options (-Dname=value) for this build only.
keel_install_python_package() {
  local args=() a
  for a in "$@"; do
    args+=("--config-settings=setup-args=$a")
  done
  [ -x "$KEEL_VENV/bin/python" ] || {
    echo "keel: ERROR: no $KEEL_VENV: run 'bash tools/deps.sh' first" >&2
    return 1
  }
  echo "keel: pip install . into $KEEL_VENV (build in build-wheel/)"
  # The venv's meson (PyPI's, >= 1.6), not Debian's 1.0: meson-python
  # reads the extension's install_rpath from its introspection data.
  PATH="$KEEL_VENV/bin:$PATH" "$KEEL_VENV/bin/python" -m pip install --quiet --no-build-isolation \
    --no-deps --config-settings=build-dir="$KEEL_SOURCE_ROOT/build-wheel" "${args[@]}" "$KEEL_SOURCE_ROOT"
}

# Everything: Debian packages, then the Python environment. A Python
# failure does not stop the caller (the build and most tests do not need
# it); the parity suite's SKIP makes it visible again.
keel_install_deps() {
  keel_install_debian
  keel_install_python || echo "keel: WARNING: the Python environment is incomplete (see above)" >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  keel_install_debian
  keel_install_python
fi
