#!/usr/bin/env bash
# Installs the Debian packages mpibert needs, only those missing, without recommends.
# libopenblas0-openmp matters: without it Debian's LibTorch uses reference BLAS (9-25x slower).
# python3-matplotlib (for /usr/bin/python3) draws results/compare's plots.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libopenblas0-openmp
  libopenmpi-dev openmpi-bin
  libhdf5-dev libcli11-dev libspdlog-dev libgtest-dev
  nlohmann-json3-dev libutf8proc-dev zlib1g-dev
  libprotobuf-dev protobuf-compiler
  python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
