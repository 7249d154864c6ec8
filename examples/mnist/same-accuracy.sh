#!/bin/sh
# Train LeNet on two devices with the same seed and compare their test
# accuracies:
#
#   same-accuracy.sh run MNIST DATA DEV_A DEV_B TOL OUTDIR [mnist args...]
#       runs `MNIST --device DEV_x --data DATA --checkpoint OUTDIR/x.st
#       [mnist args]` for both devices (DEV_B under KEEL_STRICT=1, so an op
#       that falls back to the CPU plugin is an error), then compares;
#   same-accuracy.sh compare A.txt B.txt TOL
#       compares two saved outputs only (the harness's self-test).
#
# The accuracy read is the last "test accuracy X%" a run printed; the runs
# agree when |A - B| <= TOL percentage points. Exit 0 when they agree, 1
# when they differ or a run failed or printed no accuracy, 2 on bad usage.
set -u

accuracy() {
    sed -n 's/.*test accuracy \([0-9][0-9.]*\)%.*/\1/p' "$1" | tail -n 1
}

compare() {
    a=$(accuracy "$1")
    b=$(accuracy "$2")
    if [ -z "$a" ] || [ -z "$b" ]; then
        echo "same-accuracy: no 'test accuracy' line in" \
             "$([ -z "$a" ] && echo "$1") $([ -z "$b" ] && echo "$2")"
        return 1
    fi
    if awk -v a="$a" -v b="$b" -v t="$3" \
           'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; then
        echo "same-accuracy: $a% and $b% agree within $3 points"
        return 0
    fi
    echo "same-accuracy: $a% and $b% differ by more than $3 points"
    return 1
}

case "${1:-}" in
compare)
    [ $# -eq 4 ] || { echo "usage: $0 compare A.txt B.txt TOL" >&2; exit 2; }
    compare "$2" "$3" "$4"
    exit $?
    ;;
run)
    [ $# -ge 7 ] || {
        echo "usage: $0 run MNIST DATA DEV_A DEV_B TOL OUTDIR [args...]" >&2
        exit 2
    }
    mnist=$2 data=$3 dev_a=$4 dev_b=$5 tol=$6 out=$7
    shift 7
    [ -d "$data" ] || { echo "SKIP: no $data (apt install dataset-fashion-mnist)"; exit 77; }
    mkdir -p "$out" || exit 1
    echo "== $dev_a"
    "$mnist" --device "$dev_a" --data "$data" --checkpoint "$out/a.safetensors" \
        "$@" > "$out/a.txt" 2>&1
    rc_a=$?
    cat "$out/a.txt"
    echo "== $dev_b (KEEL_STRICT=1: no CPU fallback allowed)"
    KEEL_STRICT=1 "$mnist" --device "$dev_b" --data "$data" \
        --checkpoint "$out/b.safetensors" "$@" > "$out/b.txt" 2>&1
    rc_b=$?
    cat "$out/b.txt"
    if [ $rc_a -ne 0 ] || [ $rc_b -ne 0 ]; then
        echo "same-accuracy: a run failed ($dev_a: status $rc_a, $dev_b: status $rc_b)"
        exit 1
    fi
    compare "$out/a.txt" "$out/b.txt" "$tol"
    exit $?
    ;;
*)
    echo "usage: $0 run ... | compare ..." >&2
    exit 2
    ;;
esac
