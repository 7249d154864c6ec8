#!/usr/bin/env bash
# The whole test suite: installs what is missing, then builds and runs every
# CUnit suite twice, once plain and once under AddressSanitizer +
# UndefinedBehaviorSanitizer. `tools/test.sh --valgrind` adds a third pass
# with every test under valgrind (slower; not part of the default run).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
keel_install_deps

valgrind=0
for arg in "$@"; do
  case "$arg" in
    --valgrind) valgrind=1 ;;
    *) echo "usage: tools/test.sh [--valgrind]" >&2; exit 2 ;;
  esac
done

jobs=$(nproc)

echo "== plain build"
[ -f build/build.ninja ] || meson setup build
ninja -C build
meson test -C build --print-errorlogs --num-processes "$jobs"

echo "== ASan + UBSan build"
# The CUDA kernels (nvcc, minutes to compile) are built and checked once,
# in the plain build; under the sanitizers the CUDA plugin is runtime-only.
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
    -Dplugin_cuda_kernels=disabled
else
  meson configure build-asan -Dplugin_cuda_kernels=disabled
fi
ninja -C build-asan
# The parity suite compares with Python's Paddle and runs once, above.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes "$jobs" \
    --no-suite parity

if [ "$valgrind" -eq 1 ]; then
  echo "== valgrind"
  meson test -C build --print-errorlogs --num-processes "$jobs" \
    --timeout-multiplier 10 \
    --wrapper 'valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --track-origins=yes --quiet'
fi
echo "== all test passes finished"
