#!/usr/bin/env bash
# Mixed precision training steps on the CPU plugin: float32 against
# bfloat16 auto_cast (O1, O2) for LeNet-5 and a transformer encoder block
# (the e2e/amp_* benchmarks of `keel bench`, bench/suite/kb_amp.c), at 1
# and 2 threads, and the table of their ratios.
#
#   bash bench/amp_ratio.sh [-r REPS] [-t "1 2"] [-o OUT.txt] [BUILD]
#
#   BUILD  keel build dir (default build); nothing is built here
#   -r     repetitions per benchmark (default 15), randomly interleaved
#          (--benchmark_enable_random_interleaving), so that every variant
#          sees the same machine
#   -t     thread counts (default "1 2"): KEEL_CPU_THREADS and
#          OPENBLAS_NUM_THREADS for each run
#   -o     the table (default bench/results/amp-<date>.txt; -2, -3 ... when
#          that exists); the raw JSON reports go beside it (OUT-t1.json ...)
#
# The table gives, per model and thread count, the median ms per step of
# fp32, bf16_o1 and bf16_o2 and the ratios fp32 / bf16 (above 1: bfloat16
# is faster), the op calls per step by computing dtype (from
# keel_amp_op_stats), and the CPU with its bfloat16-related flags
# (avx512_bf16, amx_bf16: without them the CPU plugin widens bfloat16 to
# float32 for its GEMMs and convolutions). OPENBLAS_CORETYPE is neither
# set nor changed. Run it while nothing else runs on the machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
reps=15 threads="1 2" out=""
while getopts "r:t:o:h" opt; do
  case $opt in
    r) reps=$OPTARG ;; t) threads=$OPTARG ;; o) out=$OPTARG ;;
    *) sed -n '2,26p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
keel=$build/core/cli/keel
[ -x "$keel" ] || { echo "amp_ratio: $keel not built (ninja -C $build)" >&2; exit 1; }
[ -d "$build/plugins/cpu" ] || { echo "amp_ratio: no $build/plugins/cpu" >&2; exit 1; }
case $reps in ''|*[!0-9]*) echo "amp_ratio: -r takes a count" >&2; exit 2 ;; esac
if [ -z "$out" ]; then
  base=$root/bench/results/amp-$(date +%F)
  out=$base.txt n=2
  while [ -e "$out" ]; do out=$base-$n.txt n=$((n + 1)); done
fi
mkdir -p "$(dirname "$out")"
stem=${out%.txt}

export KEEL_PLUGIN_PATH=$build/plugins/cpu KEEL_PLUGIN_DEFAULT_PATHS=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rc=0 reports=()
for t in $threads; do
  json=$stem-t$t.json
  echo "amp_ratio: $t thread(s), $reps repetitions -> $json" >&2
  if KEEL_CPU_THREADS=$t OPENBLAS_NUM_THREADS=$t \
      "$keel" bench --plugin cpu --filter '^e2e/amp_' --repetitions "$reps" \
      --benchmark_enable_random_interleaving=true \
      --format json --out "$json" >/dev/null 2>"$tmp/log"; then
    grep '^keel bench:' "$tmp/log" >&2 || true
  else
    cat "$tmp/log" >&2
    echo "amp_ratio: keel bench failed at $t thread(s) (see $json)" >&2
    rc=1
  fi
  [ -s "$json" ] && reports+=("$t=$json")
done
[ ${#reports[@]} -gt 0 ] || { echo "amp_ratio: no report" >&2; exit 1; }

python3 - "$out" "$reps" "${reports[@]}" <<'PY' || rc=1
import json, os, re, statistics, sys

out, reps, reports = sys.argv[1], sys.argv[2], sys.argv[3:]
VARIANTS = ("fp32", "bf16_o1", "bf16_o2")
UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def cpu_info():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k == "model name" and model == "?":
                    model = v.strip()
                elif k == "flags" and not flags:
                    flags = set(v.split())
    except OSError:
        pass
    return model, flags


lines = []
ctx = None
rows = {}      # (model, threads) -> {variant: [ms...]}
extra = {}     # (model, threads, variant) -> (ops_f32, ops_bf16, label)
errors = []
loads = []
for spec in reports:
    threads, path = spec.split("=", 1)
    with open(path) as f:
        rep = json.load(f)
    ctx = ctx or rep.get("context", {})
    la = rep.get("context", {}).get("load_avg")
    if isinstance(la, list):
        loads.append(f"{threads} thread(s) " +
                     " ".join(f"{x:.2f}" for x in la))
    for b in rep.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        m = re.fullmatch(r"e2e/amp_(\w+)_step/(\w+)/(n\d+)(/manual_time)?",
                         b.get("name", ""))
        if not m:
            continue
        model = f"{m.group(1)} {m.group(3)}"
        if b.get("error_occurred") or b.get("skipped"):
            errors.append(f"{b['name']} ({threads} thread(s)): "
                          f"{b.get('error_message', 'error')}")
            continue
        ms = b["real_time"] * UNIT[b.get("time_unit", "ns")]
        rows.setdefault((model, int(threads)), {}) \
            .setdefault(m.group(2), []).append(ms)
        extra[(model, int(threads), m.group(2))] = (
            b.get("ops_f32"), b.get("ops_bf16"), b.get("label", ""))

model, flags = cpu_info()
want = ["avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx2", "fma",
        "f16c"]
have = ", ".join(f"{x} {'yes' if x in flags else 'no'}" for x in want)
bf16_hw = "avx512_bf16" in flags or "amx_bf16" in flags
ctx = ctx or {}
lines.append("keel bench e2e/amp_*: float32 vs bfloat16 auto_cast training "
             "steps, CPU plugin")
lines.append(f"date: {ctx.get('date', '?')}; keel {ctx.get('keel_version', '?')}"
             f", plugin {ctx.get('keel_plugin', '?')} "
             f"{ctx.get('keel_plugin_version', '')}; timing: "
             f"{ctx.get('keel_timing', '?')}")
lines.append(f"CPU: {model}; {ctx.get('num_cpus', '?')} CPUs; load average "
             f"(1, 5, 15 min) at the start of each run: "
             f"{'; '.join(loads) or '?'}")
lines.append(f"CPU flags: {have}")
lines.append("bfloat16 instructions: " +
             ("yes" if bf16_hw else
              "none (no avx512_bf16 / amx_bf16): the CPU plugin widens "
              "bfloat16 to float32 for its GEMMs and convolutions"))
lines.append(f"OPENBLAS_CORETYPE: {os.environ.get('OPENBLAS_CORETYPE', '(unset)')}"
             f"; {reps} repetitions per benchmark, random interleaving; "
             f"median ms per step (min-max)")
lines.append("")
lines.append("| model | threads | fp32 ms | bf16_o1 ms | bf16_o2 ms | "
             "fp32/bf16_o1 | fp32/bf16_o2 |")
lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")


def cell(v):
    if not v:
        return "-"
    return f"{statistics.median(v):.3g} ({min(v):.3g}-{max(v):.3g})"


order = {"lenet": 0, "encoder": 1}
for (mdl, t) in sorted(rows, key=lambda k: (order.get(k[0].split()[0], 9),
                                            k[0], k[1])):
    r = rows[(mdl, t)]
    med = {v: statistics.median(r[v]) for v in VARIANTS if r.get(v)}
    ratio = [f"{med['fp32'] / med[v]:.2f}x" if "fp32" in med and v in med
             else "-" for v in VARIANTS[1:]]
    lines.append(f"| {mdl} | {t} | {cell(r.get('fp32'))} | "
                 f"{cell(r.get('bf16_o1'))} | {cell(r.get('bf16_o2'))} | "
                 f"{ratio[0]} | {ratio[1]} |")
lines.append("")
lines.append("ratio = median fp32 / median bf16: above 1 means bfloat16 is "
             "faster. The same ratio of the fastest repetitions (min fp32 / "
             "min bf16), less sensitive to other load on the machine:")
lines.append("")
lines.append("| model | threads | fp32/bf16_o1 (min) | fp32/bf16_o2 (min) |")
lines.append("| --- | ---: | ---: | ---: |")
for (mdl, t) in sorted(rows, key=lambda k: (order.get(k[0].split()[0], 9),
                                            k[0], k[1])):
    r = rows[(mdl, t)]
    best = {v: min(r[v]) for v in VARIANTS if r.get(v)}
    ratio = [f"{best['fp32'] / best[v]:.2f}x" if "fp32" in best and v in best
             else "-" for v in VARIANTS[1:]]
    lines.append(f"| {mdl} | {t} | {ratio[0]} | {ratio[1]} |")
lines.append("")
lines.append("op calls per step by the dtype they computed in "
             "(keel_amp_op_stats, float32 / bfloat16):")
seen = set()
for (mdl, t, v), (f32, bf16, label) in sorted(
        extra.items(), key=lambda kv: (order.get(kv[0][0].split()[0], 9),
                                       kv[0][0], VARIANTS.index(kv[0][2])
                                       if kv[0][2] in VARIANTS else 9)):
    if (mdl, v) in seen:
        continue
    seen.add((mdl, v))
    lab = f" [{label}]" if label else ""
    lines.append(f"  {mdl} {v}: {f32:.0f} / {bf16:.0f}{lab}"
                 if f32 is not None and bf16 is not None
                 else f"  {mdl} {v}: ?")
for e in errors:
    lines.append(f"ERROR: {e}")
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
with open(out, "w") as f:
    f.write(text)
print(f"amp_ratio: wrote {out}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
exit $rc
