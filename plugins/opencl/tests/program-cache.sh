#!/bin/sh
# The OpenCL plugin's program binary cache (docs/opencl-plugin.md):
#   1. a first start with the cache on builds the program and writes one
#      file; 2. a second start loads it; 3. a corrupted file is refused,
#   the program rebuilt from source (results still right) and the file
#   replaced; 4. with KEEL_OPENCL_CACHE unset on PoCL nothing is written.
# Each start runs one benchmark (`keel bench`, which checks its result
# against a float64 reference and reports a wrong one as an error).
#   program-cache.sh KEEL
set -u
keel=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run() { # run LOGFILE [env...]
    log=$1
    shift
    env "$@" KEEL_OPENCL_CACHE_DIR="$dir/cache" KEEL_LOG_LEVEL=info \
        "$keel" bench --plugin opencl --smoke \
        --filter '^elementwise/add/f32/4K/' > "$log" 2>&1
    rc=$?
    grep -E 'kernel program|cached kernel binary|wrong|error' "$log"
    [ $rc -eq 0 ] || fail "keel bench exited with status $rc (log: $(tail -n 3 "$log"))"
    grep -q '1 benchmarks on opencl:0.*0 wrong results, 0 errors' "$log" ||
        fail "the benchmark did not run cleanly"
}

echo "== 1. cold start, cache on"
run "$dir/1.log" KEEL_OPENCL_CACHE=1
grep -q 'kernel program built' "$dir/1.log" || fail "no 'built' line"
n=$(ls "$dir/cache" 2>/dev/null | grep -c '\.bin$')
[ "$n" -eq 1 ] || fail "expected one cache file, found $n"
f=$(ls "$dir/cache"/*.bin)
size=$(wc -c < "$f")
echo "cache file $(basename "$f"), $size bytes"

echo "== 2. warm start"
run "$dir/2.log" KEEL_OPENCL_CACHE=1
grep -q 'loaded from the cache' "$dir/2.log" || fail "the cache was not used"

echo "== 3. corrupted file"
printf 'this is not a program binary' > "$f"
run "$dir/3.log" KEEL_OPENCL_CACHE=1
grep -q 'refused' "$dir/3.log" || fail "the corrupted file was not reported"
grep -q 'kernel program built' "$dir/3.log" || fail "no rebuild from source"
grep -q 'this is not a program binary' "$f" && fail "the file was not replaced"
[ "$(wc -c < "$f")" -gt 1000 ] || fail "the replaced file is too small"

echo "== 4. PoCL, cache left at its default"
rm -rf "$dir/cache"
run "$dir/4.log"
if clinfo -l 2>/dev/null | sed -n 1p | grep -q 'Portable Computing Language'; then
    n=$(ls "$dir/cache" 2>/dev/null | grep -c '\.bin$')
    [ "$n" -eq 0 ] || fail "PoCL's default wrote $n cache files"
else
    echo "(opencl:0 is not PoCL, or clinfo is missing: the default is on there; not checked)"
fi
echo "program cache: all checks passed"
