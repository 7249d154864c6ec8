#!/bin/sh
# example-dist-resume: keel-dp-train under `mpirun -np 2`, run straight
# through for 60 LeNet steps, and again as 30 steps with a checkpoint
# followed by a resumed run to 60. Both must end with parameters that are
# the same on every rank (the program checks) and the same checksum as
# each other: the checkpoint (written by rank 0) carries everything the
# ranks need to go on.
#   check_resume.sh MPIRUN KEEL-DP-TRAIN WORKDIR
set -eu
mpirun=$1 prog=$2 dir=$3
mkdir -p "$dir"
rm -f "$dir/resume.safetensors"
run() { "$mpirun" --bind-to none -np 2 "$prog" --model lenet --batch 16 "$@"; }
run --steps 60 > "$dir/straight.txt"
run --steps 30 --checkpoint "$dir/resume.safetensors" --every 30 > "$dir/first.txt"
run --steps 60 --checkpoint "$dir/resume.safetensors" --every 1000 --resume > "$dir/resumed.txt"
cat "$dir/straight.txt" "$dir/first.txt" "$dir/resumed.txt"
grep -q "resumed" "$dir/resumed.txt" || { echo "FAIL: the second run did not resume"; exit 1; }
a=$(sed -n 's/^parameter checksum \([^ ]*\)  (identical on every rank)$/\1/p' "$dir/straight.txt")
b=$(sed -n 's/^parameter checksum \([^ ]*\)  (identical on every rank)$/\1/p' "$dir/resumed.txt")
[ -n "$a" ] && [ -n "$b" ] || { echo "FAIL: a run did not report identical ranks"; exit 1; }
[ "$a" = "$b" ] || { echo "FAIL: straight $a, resumed $b"; exit 1; }
echo "OK: straight and resumed runs end at checksum $a"
