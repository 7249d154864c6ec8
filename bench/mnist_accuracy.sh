#!/usr/bin/env bash
# Fashion-MNIST LeNet test accuracy per epoch, keel-mnist beside the same
# model, optimizer and loop in PyTorch (bench/mnist_train.py), over several
# seeds: the numbers behind "at least PyTorch's accuracy at equal epochs".
#
#   bash bench/mnist_accuracy.sh [-b BUILD] [-e EPOCHS] [-s "0 1 2"]
#                                [-o OUT.txt]
#
#   -b  keel build dir (default build)   -e  epochs (default 10)
#   -s  seeds (default "0 1 2")          -o  also write the report here
#
# For each seed keel and PyTorch train at the same time, one thread each
# (one core each on a 2-core machine); speed is not measured here (see
# mnist_throughput.sh). Prints every run's accuracy after each epoch, then
# per epoch the mean, min and max over seeds of both. TORCH_PYTHON
# (default: the project's .venv/bin/python, where
# KEEL_WITH_TORCH=1 bash tools/deps.sh installs PyTorch) chooses the
# interpreter.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=build epochs=10 seeds="0 1 2" out=""
while getopts "b:e:s:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;; e) epochs=$OPTARG ;; s) seeds=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,18p' "$0"; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
keel_bin=$build/examples/mnist/keel-mnist
[ -x "$keel_bin" ] || { echo "mnist_accuracy: $keel_bin not built" >&2; exit 1; }
torch_py=${TORCH_PYTHON:-$root/.venv/bin/python}
"$torch_py" -c 'import torch' 2>/dev/null ||
  { echo "mnist_accuracy: torch does not import with $torch_py (run: KEEL_WITH_TORCH=1 bash tools/deps.sh)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

for s in $seeds; do
  echo "seed $s: keel and torch, $epochs epochs, 1 thread each" >&2
  (cd "$tmp" && KEEL_CPU_THREADS=1 OPENBLAS_NUM_THREADS=1 "$keel_bin" \
     --epochs "$epochs" --seed "$s" --checkpoint "$tmp/keel-$s.safetensors" \
     >"$tmp/keel-$s.log" 2>&1) &
  k=$!
  "$torch_py" "$here/mnist_train.py" torch --threads 1 --epochs "$epochs" \
    --seed "$s" >"$tmp/torch-$s.log" 2>&1 &
  t=$!
  wait $k || { echo "mnist_accuracy: keel failed:" >&2; tail "$tmp/keel-$s.log" >&2; exit 1; }
  wait $t || { echo "mnist_accuracy: torch failed:" >&2; tail "$tmp/torch-$s.log" >&2; exit 1; }
done

python3 - "$tmp" "$epochs" $seeds <<'EOF' | tee ${out:+"$out"}
import re, sys
d, epochs, seeds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
acc = {}
for fw in ("keel", "torch"):
    for s in seeds:
        vals = [float(m.group(1)) for m in re.finditer(
            r"^epoch \d+/\d+ .*test accuracy ([0-9.]+)%",
            open(f"{d}/{fw}-{s}.log").read(), re.M)]
        if len(vals) != epochs:
            sys.exit(f"mnist_accuracy: {fw} seed {s}: {len(vals)} epochs "
                     f"in its log, expected {epochs}")
        acc[fw, s] = vals
print("test accuracy (%) after each epoch, LeNet, Adam 1e-3, batch 64")
print("epoch  " + "  ".join(f"{fw}/{s:>2}" for fw in ("keel", "torch")
                            for s in seeds)
      + "   keel mean (min-max)   torch mean (min-max)")
for e in range(epochs):
    row = [acc[fw, s][e] for fw in ("keel", "torch") for s in seeds]
    def stat(fw):
        v = [acc[fw, s][e] for s in seeds]
        return f"{sum(v) / len(v):6.2f} ({min(v):.2f}-{max(v):.2f})"
    print(f"{e + 1:5d}  " + "  ".join(f"{v:7.2f}" for v in row)
          + f"   {stat('keel'):>20}   {stat('torch'):>20}")
EOF
