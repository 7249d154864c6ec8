#!/usr/bin/env bash
# The whole test suite: installs what is missing (Debian packages and the
# Python environment .venv/, see tools/deps.sh), then builds and runs every
# CUnit suite in two passes:
#   1. plain gcc build (build/), with the allocation-failure walk and the
#      CUDA kernels (nvcc, compiled once, here only);
#   2. clang, AddressSanitizer + UndefinedBehaviorSanitizer, with the
#      libFuzzer targets (build-clang/): the suites again, then every fuzz
#      target replays its regression inputs and fuzzes for
#      KEEL_FUZZ_SECONDS (default 20) from its seed corpus.
# Options (docs/testing.md):
#   --gcc-asan    adds the same sanitizer pass built with gcc (build-asan/)
#   --valgrind    adds a pass with every test under valgrind (slower)
#   --tsan        adds a ThreadSanitizer pass (build-tsan/) over the core,
#                 CPU plugin and conformance suites (inline and
#                 KEEL_CPU_ASYNC=1)
#   --fuzz-long   fuzzes each target for KEEL_FUZZ_LONG_SECONDS (default
#                 600) instead of the short bounded run
#   --no-clang    skips pass 2 and runs the gcc sanitizer pass instead
# Every SKIP is listed after the plain pass; a SKIP of the parity suite
# fails the run (KEEL_ALLOW_PARITY_SKIP=1: a warning instead).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
keel_install_deps

valgrind=0 tsan=0 clang=1 fuzz_long=0 gcc_asan=0
for arg in "$@"; do
  case "$arg" in
    --valgrind) valgrind=1 ;;
    --tsan) tsan=1 ;;
    --fuzz-long) fuzz_long=1 ;;
    --no-clang) clang=0 ;;
    --gcc-asan) gcc_asan=1 ;;
    *) echo "usage: tools/test.sh [--valgrind] [--tsan] [--fuzz-long]" \
            "[--no-clang] [--gcc-asan]" >&2; exit 2 ;;
  esac
done

jobs=$(nproc)

# Every test meson reported as SKIP in BUILD, with the reason each printed;
# exit status 1 when one of them belongs to the parity suite, the onnx
# suite (the checks against onnxruntime) or the python suite (the Python
# package's pytest run): all three need only .venv.
report_skips() {
  /usr/bin/python3 - "$1/meson-logs/testlog.json" <<'EOF'
import json, sys
parity = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    if t["result"] != "SKIP":
        continue
    suites = t["name"].split(" / ")[0].split(":", 1)[-1].split("+")
    parity += ("parity" in suites or "onnx" in suites or
               "python" in suites)
    lines = [l for l in t["stdout"].splitlines()
             if l.strip() and set(l.strip()) != {"!"}]
    # The program's own SKIP line when it printed one, else its last lines.
    said = [l for l in lines if "skip" in l.lower()]
    why = said[-4:] if said else lines[-4:]
    print(f"SKIPPED (not a pass): {t['name']}: "
          f"{why[0].strip() if why else 'no reason printed'}")
    for l in why[1:]:
        print(f"    {l.strip()}")
sys.exit(1 if parity else 0)
EOF
}

parity_skipped=0
echo "== plain build"
# The CUDA kernels are compiled for one architecture here (default 80: SASS
# for sm_80 and PTX that newer GPUs compile at load), half the nvcc time of
# the default 80,90; KEEL_TEST_CUDA_ARCHS=80,90 checks both.
[ -f build/build.ninja ] || meson setup build \
  -Dplugin_cuda_archs="${KEEL_TEST_CUDA_ARCHS:-80}"
ninja -C build
# The Python package as users install it (pip install . into .venv), for
# the python-installed test. GPU kernels are left out of this second
# build: the plain build above compiles and checks them.
keel_install_python_package -Dplugin_cuda_kernels=disabled \
  -Dplugin_hip_kernels=disabled ||
  echo "keel: WARNING: pip install . failed; python-installed will SKIP" >&2
meson test -C build --print-errorlogs --num-processes "$jobs"
report_skips build || parity_skipped=1

# Some sanitizer pass always runs: clang's by default, gcc's without it.
[ "$clang" -eq 1 ] || gcc_asan=1
if [ "$gcc_asan" -eq 1 ]; then
echo "== gcc ASan + UBSan build"
# The CUDA kernels (nvcc, minutes to compile) are built and checked once,
# in the plain build; under the sanitizers the CUDA plugin is runtime-only.
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
    -Dplugin_cuda_kernels=disabled -Dplugin_hip_kernels=disabled
else
  meson configure build-asan -Dplugin_cuda_kernels=disabled -Dplugin_hip_kernels=disabled
fi
ninja -C build-asan
# The parity suite compares with Python's Paddle and runs once, above.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes "$jobs" \
    --no-suite parity --no-suite opencl-cache
fi

if [ "$valgrind" -eq 1 ]; then
  echo "== valgrind"
  meson test -C build --print-errorlogs --num-processes "$jobs" \
    --timeout-multiplier 10 \
    --no-suite allocfail \
    --wrapper 'valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --track-origins=yes --quiet'
fi
if [ "$clang" -eq 1 ]; then
  echo "== clang build: ASan + UBSan, libFuzzer targets"
  if [ ! -f build-clang/build.ninja ]; then
    CC=clang meson setup build-clang -Db_sanitize=address,undefined \
      -Db_lundef=false -Dplugin_cuda_kernels=disabled -Dplugin_hip_kernels=disabled -Dfuzz=true
  fi
  ninja -C build-clang
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-clang --print-errorlogs --num-processes "$jobs" \
      --no-suite parity --no-suite fuzz --no-suite opencl-cache
  if [ "$fuzz_long" -eq 1 ]; then
    export KEEL_FUZZ_SECONDS="${KEEL_FUZZ_LONG_SECONDS:-600}"
  fi
  echo "== fuzz targets, ${KEEL_FUZZ_SECONDS:-20}s each"
  meson test -C build-clang --print-errorlogs --num-processes "$jobs" \
    --suite fuzz
fi

if [ "$tsan" -eq 1 ]; then
  echo "== ThreadSanitizer"
  if [ ! -f build-tsan/build.ninja ]; then
    meson setup build-tsan -Db_sanitize=thread -Db_lundef=false \
      -Dplugin_cuda_kernels=disabled -Dplugin_hip_kernels=disabled
  fi
  ninja -C build-tsan
  # The conform suite runs `keel conform --plugin cpu` inline, with
  # KEEL_CPU_ASYNC=1 and in discrete mode; the cpu suite covers both
  # stream modes of the plugin's runtime.
  # The deliberately broken plugins (conform-broken-*) are left out: some
  # of them race on purpose (an event that never orders two streams), which
  # is what keel conform must catch, and TSan would stop them first.
  tsan_tests=$(meson test -C build-tsan --list --suite core --suite cpu \
                 --suite conform 2>/dev/null | sed -n 's|^keel:[^ ]* / ||p' |
               grep -v '^conform-broken-')
  # shellcheck disable=SC2086
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:${TSAN_OPTIONS:-}" \
    meson test -C build-tsan --print-errorlogs --num-processes "$jobs" \
      --timeout-multiplier 4 $tsan_tests
fi

if [ "$parity_skipped" -eq 1 ]; then
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  echo "tools/test.sh: FAILED: the parity suite (keel against PaddlePaddle),"
  echo "the onnx suite (keel against onnxruntime) or the python suite was"
  echo "SKIPPED, not run. Their Python environment is missing or incomplete:"
  echo "run 'bash tools/deps.sh' (it creates .venv/ and installs paddlepaddle,"
  echo "numpy, onnx, onnxruntime and pytest into it), then tools/test.sh again."
  echo "KEEL_ALLOW_PARITY_SKIP=1 makes this a warning (for machines without PyPI)."
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  [ "${KEEL_ALLOW_PARITY_SKIP:-0}" = "1" ] || exit 1
fi
echo "== all test passes finished"
