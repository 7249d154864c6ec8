#!/usr/bin/env bash
# Install the Debian packages keel needs, when they are missing.
# Sourced by main.sh and test.sh; safe to run on its own.
set -euo pipefail

KEEL_DEBIAN_PACKAGES=(
  build-essential pkg-config meson ninja-build
  libopenblas-dev libyaml-dev libcunit1-dev libbenchmark-dev
  libjansson-dev libssl-dev zlib1g-dev
  valgrind dataset-fashion-mnist
)

keel_install_deps() {
  local missing=() p
  for p in "${KEEL_DEBIAN_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "keel: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  keel_install_deps
fi
