#!/usr/bin/env bash
# The CPU plugin's SIMD levels side by side: Fashion-MNIST LeNet training
# (keel-mnist, batch 64, one epoch on the first N images) at each level
# KEEL_CPU_ISA allows on this CPU, in interleaved rounds, and the ratio of
# each level's training images/s to the sse2 baseline's, per round.
#
#   bash bench/isa_ratio.sh [-r ROUNDS] [-n IMAGES] [-t THREADS] [-o OUT] [BUILD]
#
#   BUILD  keel build dir (default build); nothing is built here
#   -r     rounds (default 7); each runs every level once, in turn
#   -n     training images per run (default 12800)
#   -t     KEEL_CPU_THREADS and OPENBLAS_NUM_THREADS (default 1)
#   -o     the table (default: stdout only)
#
# Levels above the CPU's are left out (the plugin would lower them).
# OPENBLAS_CORETYPE is neither set nor changed. Run it while nothing else
# runs on the machine; the spread of the per-round ratios says how noisy
# the machine was.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
rounds=7 images=12800 threads=1 out=""
while getopts "r:n:t:o:h" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    n) images=$OPTARG ;;
    t) threads=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,18p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
build=${1:-$root/build}
mnist=$build/examples/mnist/keel-mnist
[ -x "$mnist" ] || { echo "no $mnist: build keel first" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "no $data (Debian: dataset-fashion-mnist)" >&2; exit 1; }

levels="sse2"
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && levels="$levels avx2"
grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
  levels="$levels avx512"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KEEL_PLUGIN_PATH=$build/plugins/cpu KEEL_PLUGIN_DEFAULT_PATHS=0
export KEEL_CPU_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
for r in $(seq 1 "$rounds"); do
  for isa in $levels; do
    v=$(KEEL_CPU_ISA=$isa "$mnist" --data "$data" --epochs 1 \
          --limit "$images" --log-every 0 \
          --checkpoint "$tmp/ck.safetensors" 2>&1 |
        sed -n 's/.*  \([0-9]*\) images\/s.*/\1/p')
    echo "$r $isa $v" >> "$tmp/raw"
  done
done
python3 - "$tmp/raw" "$threads" "$images" <<'PY' | tee ${out:+"$out"}
import platform, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, isa, v in rows:
    by.setdefault(isa, {})[int(r)] = float(v)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), platform.processor())
print(f"LeNet training, Fashion-MNIST, batch 64, {sys.argv[3]} images per "
      f"run, {sys.argv[2]} thread(s); {cpu}")
print(f"{'level':8s} {'images/s (median)':>18s} {'min':>8s} {'max':>8s} "
      f"{'vs sse2 (median of rounds)':>28s} {'min':>6s} {'max':>6s}")
base = by["sse2"]
for isa, runs in by.items():
    vals = list(runs.values())
    ratios = [runs[r] / base[r] for r in runs if r in base and base[r] > 0]
    print(f"{isa:8s} {statistics.median(vals):18.0f} {min(vals):8.0f} "
          f"{max(vals):8.0f} {statistics.median(ratios):27.2f}x "
          f"{min(ratios):6.2f} {max(ratios):6.2f}")
print("raw (round level images/s):")
for r, isa, v in rows:
    print(f"  {r} {isa} {v}")
PY
