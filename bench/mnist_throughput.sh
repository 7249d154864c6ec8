#!/usr/bin/env bash
# Fashion-MNIST LeNet training throughput and peak memory: keel-mnist beside
# the same model, optimizer and loop in PyTorch and PaddlePaddle
# (bench/mnist_train.py), at 1 and 2 threads, interleaved in one run so that
# all three see the same machine.
#
#   bash bench/mnist_throughput.sh [-b BUILD] [-r ROUNDS] [-e EPOCHS]
#                                  [-l LIMIT] [-t "1 2"] [-o OUT.json]
#                                  [-x VAR=VALUE]
#
#   -b  keel build dir (default build)     -r  rounds of the whole set (1)
#   -e  epochs per run (1)                 -l  train on the first N images
#   -t  thread counts ("1 2")              -o  JSON results file
#   -x  also run keel with this environment variable set, reported as
#       keel+VAR=VALUE (e.g. -x OPENBLAS_CORETYPE=SkylakeX)
#   TORCH_PYTHON and PADDLE_PYTHON choose the interpreters (default for
#   both: the project's .venv/bin/python; tools/deps.sh installs Paddle
#   there, KEEL_WITH_TORCH=1 bash tools/deps.sh adds PyTorch); a framework
#   that does not import is reported as absent.
#
# Each run goes through /usr/bin/time -v: images/s is the training loop of
# the last epoch as each program prints it, max RSS is the whole process.
# keel's threads: KEEL_CPU_THREADS (the CPU plugin's pool) and
# OPENBLAS_NUM_THREADS; the anchors get OMP/MKL/OpenBLAS thread variables
# and torch.set_num_threads.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=build rounds=1 epochs=1 limit=0 threads="1 2" out="" extra=""
while getopts "b:r:e:l:t:o:x:h" opt; do
  case $opt in
    b) build=$OPTARG ;; r) rounds=$OPTARG ;; e) epochs=$OPTARG ;;
    l) limit=$OPTARG ;; t) threads=$OPTARG ;; o) out=$OPTARG ;;
    x) extra=$OPTARG ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
keel_bin=$build/examples/mnist/keel-mnist
[ -x "$keel_bin" ] || { echo "mnist_throughput: $keel_bin not built (ninja -C $build)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "mnist_throughput: needs /usr/bin/time (Debian: time)" >&2; exit 1; }
torch_py=${TORCH_PYTHON:-$root/.venv/bin/python}
paddle_py=${PADDLE_PYTHON:-$root/.venv/bin/python}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

have=(keel)
[ -n "$extra" ] && have+=("keel+$extra")
if "$torch_py" -c 'import torch' 2>/dev/null; then have+=(torch)
else echo "mnist_throughput: torch does not import with $torch_py: skipped" >&2; fi
if "$paddle_py" -c 'import paddle' 2>/dev/null; then have+=(paddle)
else echo "mnist_throughput: paddle does not import with $paddle_py: skipped" >&2; fi

limit_arg=()
[ "$limit" != 0 ] && limit_arg=(--limit "$limit")

run_one() { # fw threads log
  local fw=$1 t=$2 log=$3
  case $fw in
    keel|keel+*)
      (cd "$tmp" && if [ "$fw" != keel ]; then export "${fw#keel+}"; fi &&
       KEEL_CPU_THREADS=$t OPENBLAS_NUM_THREADS=$t \
         /usr/bin/time -v "$keel_bin" --epochs "$epochs" \
         --checkpoint "$tmp/ck.safetensors" "${limit_arg[@]}") ;;
    torch) /usr/bin/time -v "$torch_py" "$here/mnist_train.py" torch \
             --threads "$t" --epochs "$epochs" "${limit_arg[@]}" ;;
    paddle) /usr/bin/time -v "$paddle_py" "$here/mnist_train.py" paddle \
             --threads "$t" --epochs "$epochs" "${limit_arg[@]}" ;;
  esac >"$log" 2>&1
}

results=$tmp/results.tsv
: >"$results"
for r in $(seq 1 "$rounds"); do
  for t in $threads; do
    for fw in "${have[@]}"; do
      log=$tmp/$fw-$t-$r.log
      if ! run_one "$fw" "$t" "$log"; then
        echo "mnist_throughput: $fw at $t thread(s) failed:" >&2
        tail -5 "$log" >&2; exit 1
      fi
      ips=$(tr '\r' '\n' <"$log" | grep -E '^epoch [0-9]+/[0-9]+ .*images/s' |
            tail -1 | sed -E 's/.* ([0-9]+) images\/s.*/\1/')
      acc=$(tr '\r' '\n' <"$log" | grep -E '^epoch [0-9]+/[0-9]+ .*accuracy' |
            tail -1 | sed -E 's/.*accuracy ([0-9.]+)%.*/\1/')
      rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$log")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$fw" "$t" "$r" "$ips" "$acc" "$rss" >>"$results"
      printf 'round %s  %-8s %s thread(s): %6s images/s  test %s%%  max RSS %s MiB\n' \
        "$r" "$fw" "$t" "$ips" "$acc" "$((rss / 1024))"
    done
  done
done

python3 - "$results" "$out" "$epochs" "$limit" <<'PY'
import json, statistics, sys, platform, datetime
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
out, epochs, limit = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
agg = {}
for fw, t, r, ips, acc, rss in rows:
    a = agg.setdefault((fw, int(t)), {"ips": [], "acc": [], "rss_kb": []})
    a["ips"].append(float(ips)); a["acc"].append(float(acc))
    a["rss_kb"].append(int(rss))
print("\nmedian images/s (ratio to torch at the same threads), max RSS:")
table = []
for (fw, t), a in sorted(agg.items(), key=lambda k: (k[0][1], k[0][0])):
    ips = statistics.median(a["ips"])
    ref = agg.get(("torch", t))
    ratio = ips / statistics.median(ref["ips"]) if ref else None
    rss = max(a["rss_kb"]) / 1024
    table.append({"framework": fw, "threads": t, "images_per_s": a["ips"],
                  "median_images_per_s": ips, "ratio_to_torch": ratio,
                  "test_accuracy_pct": a["acc"], "max_rss_mib": rss})
    print(f"  {fw:<9}{t} thread(s): {ips:8.0f} images/s"
          + (f"  x{ratio:.2f} torch" if ratio else "") + f"  {rss:7.0f} MiB")
if out:
    json.dump({"benchmark": "fashion-mnist lenet adam batch 64, training loop",
               "date": datetime.datetime.utcnow().isoformat() + "Z",
               "machine": platform.processor() or platform.machine(),
               "epochs": epochs, "limit": limit, "results": table},
              open(out, "w"), indent=1)
    print("wrote", out)
PY
