#!/bin/sh
# The sample plugin built the way a vendor builds it: against an installed
# keel found by pkg-config alone. Installs the build tree's development
# files (headers, libkeel-kit.a, .pc files) into a staging folder, builds
# the plugin with its own Makefile and nothing but pkg-config, and checks
#   - that the flags pkg-config gave point into the staged install;
#   - that the plugin carries the kit's check (keel_kit_check_name);
#   - that `keel conform` passes its kernel tests, bad-argument cases
#     included, on the result.
# usage: check-pkgconfig.sh BUILD_ROOT PLUGIN_SRC_DIR STAGE KEEL_CLI
set -eu
build=$1 src=$2 stage=$3 cli=$4
if ! "$cli" conform --help >/dev/null 2>&1; then
    echo "SKIP: keel was built without 'keel conform' (install libcunit1-dev" \
         "libyaml-dev libjansson-dev libssl-dev, or run tools/deps.sh)"
    exit 77
fi
rm -rf "$stage"
mkdir -p "$stage"
meson install -C "$build" --no-rebuild --quiet --tags devel \
    --destdir "$stage/root" >"$stage/install.log" 2>&1 || {
    cat "$stage/install.log"; exit 1; }
pc=$(find "$stage/root" -name keel-kit.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: no keel-kit.pc was installed"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
PKG_CONFIG_SYSROOT_DIR="$stage/root"
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
flags=$(pkg-config --cflags --libs keel-kit)
echo "pkg-config --cflags --libs keel-kit: $flags"
case "$flags" in
*"$stage/root"*) ;;
*) echo "FAIL: pkg-config's flags do not point into the staged install"; exit 1 ;;
esac
make -s -C "$src" OUT="$stage/libkeel-sample.so" CFLAGS=-O1
nm "$stage/libkeel-sample.so" | grep -q ' keel_kit_check_name$' || {
    echo "FAIL: the plugin does not contain the kit's check"; exit 1; }
KEEL_PLUGIN_DEFAULT_PATHS=0 "$cli" conform --plugin "$stage/libkeel-sample.so" \
    --level smoke --filter 'kernels*' >"$stage/conform.txt" 2>&1 || {
    cat "$stage/conform.txt"; echo "FAIL: keel conform"; exit 1; }
tail -n 5 "$stage/conform.txt"
echo "PASS: the sample plugin builds with pkg-config alone and links the kit"
