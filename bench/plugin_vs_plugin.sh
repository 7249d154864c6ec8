#!/usr/bin/env bash
# One plugin beside another on the same machine: `keel bench` on plugin A
# and on plugin B in alternating rounds (A B A B ...), so that a change in
# the machine's load falls on both, then per benchmark the median time of
# each and the ratio B/A in speed (> 1: B is faster).
#
#   bash bench/plugin_vs_plugin.sh [-b BUILD] [-a cpu] [-B opencl]
#        [-r ROUNDS] [-t MIN_TIME] [-f FILTER] [-o OUT.txt]
#
#   -b  keel build dir (default build)  -a/-B  the plugins (cpu, opencl)
#   -r  rounds (default 3)              -t  --min-time per benchmark (0.2)
#   -f  keel bench --filter (default: the kernels and the LeNet step)
#   -o  also write the report here
# KEEL_PLUGIN_PATH defaults to the build's cpu and opencl plugins.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=build a=cpu b=opencl rounds=3 mintime=0.2 out=""
filter='^(elementwise/(add|relu|exp|gelu)/f32/16M|reduce/|matmul/f32/|conv2d/f32/|softmax/|layer_norm/|cross_entropy/|optimizer/adam|e2e/lenet|e2e/mlp)'
while getopts "b:a:B:r:t:f:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;; a) a=$OPTARG ;; B) b=$OPTARG ;; r) rounds=$OPTARG ;;
    t) mintime=$OPTARG ;; f) filter=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
keel=$build/core/cli/keel
[ -x "$keel" ] || { echo "plugin_vs_plugin: $keel not built" >&2; exit 1; }
export KEEL_PLUGIN_PATH=${KEEL_PLUGIN_PATH:-$build/plugins/cpu:$build/plugins/opencl}
export KEEL_PLUGIN_DEFAULT_PATHS=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

for r in $(seq 1 "$rounds"); do
  for p in "$a" "$b"; do
    echo "round $r/$rounds: $p" >&2
    "$keel" bench --plugin "$p" --filter "$filter" --min-time "$mintime" \
      --format json --out "$tmp/$p-$r.json" > "$tmp/$p-$r.log" 2>&1 ||
      { echo "plugin_vs_plugin: keel bench --plugin $p failed:" >&2
        tail "$tmp/$p-$r.log" >&2; exit 1; }
  done
done

python3 - "$tmp" "$a" "$b" "$rounds" <<'PY' | tee ${out:+"$out"}
import json, statistics, sys
d, a, b, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
times, errors, ctx = {}, {}, None
for p in (a, b):
    for r in range(1, rounds + 1):
        doc = json.load(open(f"{d}/{p}-{r}.json"))
        ctx = ctx or doc.get("context", {})
        for bm in doc.get("benchmarks", []):
            name = bm["name"].replace("/manual_time", "").replace("/real_time", "")
            if bm.get("error_occurred"):
                errors[p, name] = bm.get("error_message", "error")
                continue
            if bm.get("run_type", "iteration") != "iteration":
                continue
            t = bm["real_time"] * unit[bm.get("time_unit", "ns")]
            times.setdefault((p, name), []).append(t)
names = sorted({n for (_, n) in times} | {n for (_, n) in errors})
print(f"{b} beside {a}: median of {rounds} alternating rounds per plugin")
print(f"host: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
      f"load average {ctx.get('load_avg', '?')}")
print(f"{'benchmark':46} {a + ' ms':>11} {b + ' ms':>11} {b + '/' + a + ' speed':>16}")
for n in names:
    ta, tb = times.get((a, n)), times.get((b, n))
    def cell(p, t):
        if t:
            return f"{statistics.median(t) * 1e3:11.3f}"
        return f"{'(' + errors.get((p, n), 'n/a')[:9] + ')':>11}"
    ratio = (f"{statistics.median(ta) / statistics.median(tb):16.2f}"
             if ta and tb else f"{'':16}")
    print(f"{n:46} {cell(a, ta)} {cell(b, tb)} {ratio}")
PY
