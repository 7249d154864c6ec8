#!/bin/sh
# Record tests/kitcases/before.tsv: the verdicts of the CPU plugin and of
# the CUDA plugin's kernel entry points, at the commit before the kernel
# kit existed, for every (op, mutation) of the current case table.
#
#   tests/kitcases/record-before.sh [BUILD]
#
# BUILD (default: build) is a configured build of this tree; its kit
# library makes the mutants (the drivers need nothing of the kit to call a
# plugin). The old commit is checked out as a worktree (KITCASES_BEFORE_WT,
# default ../before next to this tree) and built there with the CUDA
# kernels when nvcc is found (KITCASES_ARCHS, default 80: one arch is
# enough, nothing runs on a GPU). Without nvcc the cuda column is "-".
set -eu

rev=${KITCASES_BEFORE_REV:-c79c7ff}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
wt=${KITCASES_BEFORE_WT:-$(dirname "$src")/before}
archs=${KITCASES_ARCHS:-80}
cuda=${CUDA_PATH:-/usr/local/cuda}
out="$src/tests/kitcases/before.tsv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -d "$wt" ]; then
    git -C "$src" worktree add --detach "$wt" "$rev"
fi
have_nvcc=no
if [ -x "$cuda/bin/nvcc" ]; then
    have_nvcc=yes
fi
if [ ! -f "$wt/build/build.ninja" ]; then
    if [ $have_nvcc = yes ]; then
        kern=enabled
    else
        kern=disabled
    fi
    meson setup "$wt/build" "$wt" -Dtests=false -Dplugin_cuda_kernels=$kern \
        -Dplugin_cuda_archs="$archs"
fi
nice ninja -C "$wt/build" -j"${KITCASES_JOBS:-2}"
cpu="$wt/build/plugins/cpu/libkeel-cpu.so"
ninja -C "$build" tests/kitcases/kitcases device-api/libkeel-kit.a >/dev/null

driver="$build/tests/kitcases/kitcases"
cobj="$wt/build/plugins/cuda/libkeel-cuda.so.p"
if [ $have_nvcc = yes ] && [ -f "$wt/build/plugins/cuda/k_core.o" ] &&
   [ -f "$cobj/kernels_cuda_kernels.c.o" ]; then
    # The CUDA driver on the old plugin's own objects (kitcases cuda.c).
    kc="$src/tests/kitcases"
    cc -std=c11 -D_GNU_SOURCE -O1 -I"$src/device-api/include" -I"$kc" \
        "$kc/main.c" "$kc/cases.c" "$kc/drivers.c" "$kc/cuda.c" \
        "$cobj"/*.o "$wt/build/plugins/cuda"/k_*.o \
        "$build/device-api/libkeel-kit.a" \
        -Wl,--wrap=cuda_enter -Wl,--wrap=cuda_stream_resolve \
        "$cuda/lib64/libcudart_static.a" -ldl -lrt -lpthread -lstdc++ -lm \
        -o "$tmp/kitcases-cuda-before"
    driver="$tmp/kitcases-cuda-before"
    cols="cpu and cuda"
else
    echo "record-before: no CUDA objects at $rev (nvcc needed): cuda column '-'" >&2
    cols="cpu only"
fi

"$driver" record --cpu "$cpu" > "$tmp/body"
{
    echo "# kitcases before-table: verdicts at commit $(git -C "$wt" rev-parse --short HEAD) (main before the kernel kit), $cols"
    echo "# produced by: tests/kitcases/record-before.sh (the CPU plugin dlopened, the CUDA kernel entry points called without a GPU)"
    echo "# verdicts: ACCEPTED (OK), REJECTED (INVALID_ARGUMENT or NOT_SUPPORTED), PASSED-CHECKS (cuda: failed only at the first CUDA call),"
    echo "#           OTHER(status), CRASH(signal), - (not run)"
    printf '# op\tmutation\tcpu\tcuda\n'
    cat "$tmp/body"
} > "$out"
echo "record-before: wrote $(grep -vc '^#' "$out") cases to $out"
