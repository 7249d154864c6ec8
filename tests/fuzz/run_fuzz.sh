#!/bin/sh
# Run one libFuzzer target as a test: usage run_fuzz.sh FUZZER SEEDS REGRESSIONS
#
#  1. every input under REGRESSIONS (crashes found before, committed) is
#     replayed once and must run clean;
#  2. the target fuzzes for KEEL_FUZZ_SECONDS (default 20) from SEEDS plus
#     the corpus it grew in earlier runs (corpus-NAME/ in the working folder,
#     the build folder under meson). A crash, a sanitizer report, a leak, an
#     input slower than KEEL_FUZZ_TIMEOUT seconds (default 10) or more than
#     2 GB of memory fails the test and leaves the input as crash-*, leak-*,
#     timeout-* or oom-* in the working folder, named in the output.
# Extra arguments for libFuzzer can be given in KEEL_FUZZ_ARGS.
set -eu
fuzzer=$1 seeds=$2 regressions=$3
case $fuzzer in */*) ;; *) fuzzer=./$fuzzer ;; esac  # meson passes a bare name
secs=${KEEL_FUZZ_SECONDS:-20}
per_input=${KEEL_FUZZ_TIMEOUT:-10}
name=$(basename "$fuzzer")
corpus=corpus-${name#fuzz_}

# Sanitizer reports are fatal; huge allocations return NULL (the parsers
# must report them) instead of stopping the run.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS UBSAN_OPTIONS

# libFuzzer's default exit status for a finding is 77, which meson reads
# as SKIP: every finding must be a failure.
common="-timeout=$per_input -rss_limit_mb=2048 -malloc_limit_mb=2048"
common="$common -error_exitcode=1 -timeout_exitcode=1"

if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
  echo "== $name: replaying $(ls -A "$regressions" | wc -l) regression inputs"
  # shellcheck disable=SC2086
  "$fuzzer" $common "$regressions"/*
fi

mkdir -p "$corpus"
echo "== $name: fuzzing for ${secs}s (seeds $seeds, corpus $PWD/$corpus)"
# shellcheck disable=SC2086
exec "$fuzzer" $common -max_total_time="$secs" -print_final_stats=1 \
  -artifact_prefix="$PWD/" ${KEEL_FUZZ_ARGS:-} "$corpus" "$seeds"
