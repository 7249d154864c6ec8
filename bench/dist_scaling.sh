#!/usr/bin/env bash
# Data-parallel scaling on one machine: the same global batch trained by
# 2 ranks x 1 thread (mpirun -np 2) and by 1 rank x 2 threads, in
# interleaved rounds; and the transformer block's peak memory with and
# without recompute.
#
#   bash bench/dist_scaling.sh [-b BUILD] [-r ROUNDS] [-s STEPS]
#
# Each line is one run of examples/dist/keel-dp-train as it reports
# itself: samples/s of the training loop, the share of step time inside
# the gradient all-reduces (which includes waiting for the slower rank)
# and the share backward did not hide, and the peak of allocated device
# memory on rank 0. The 2-rank runs go with overlap on and off.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=build rounds=3 steps=150
while getopts "b:r:s:h" opt; do
  case $opt in
    b) build=$OPTARG ;; r) rounds=$OPTARG ;; s) steps=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
prog=$build/examples/dist/keel-dp-train
[ -x "$prog" ] || { echo "dist_scaling: $prog not built" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "dist_scaling: no mpirun (openmpi-bin)" >&2; exit 1; }
export KEEL_PLUGIN_PATH=$build/plugins/cpu KEEL_PLUGIN_DEFAULT_PATHS=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
line() { grep -E "^steps" | sed 's/^/    /'; }
for r in $(seq 1 "$rounds"); do
  echo "round $r"
  for m in "lenet 32" "block 8"; do
    set -- $m
    for ov in "" "--no-overlap"; do
      echo "  $1, 2 ranks x 1 thread, batch $2 per rank ${ov:-(overlap)}:"
      mpirun --bind-to none -np 2 "$prog" --model "$1" --steps "$steps" \
        --batch "$2" --threads 1 $ov | line
    done
    echo "  $1, 1 rank x 2 threads, batch $(( $2 * 2 )):"
    "$prog" --model "$1" --steps "$steps" --batch $(( $2 * 2 )) \
      --threads 2 | line
  done
  # Many buckets: 2 blocks in 1 MiB buckets, overlap on and off.
  for ov in "" "--no-overlap"; do
    echo "  2 blocks, 1 MiB buckets, 2 ranks x 1 thread, batch 8 per rank ${ov:-(overlap)}:"
    mpirun --bind-to none -np 2 "$prog" --model block --layers 2 \
      --bucket-mb 1 --steps $(( steps / 3 )) --batch 8 --threads 1 $ov | line
  done
  for rc in "" "--recompute"; do
    echo "  4 blocks, 1 rank x 1 thread, batch 16 ${rc:-(no recompute)}:"
    "$prog" --model block --layers 4 --steps 10 --batch 16 --threads 1 $rc | line
  done
done
