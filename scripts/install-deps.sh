#!/usr/bin/env bash
# Installs what mpibert needs, only what is missing:
#  - Debian packages (without recommends): compilers, Open MPI, HDF5, spdlog, CLI11, ...;
#  - LibTorch: PyTorch's wheel from PyPI (torch==2.11.0, the version of the GPU image, built for
#    CUDA 13.0 with cuDNN, NCCL and Kineto) in the project's virtual environment .venv/. The build
#    finds it there (CMakeLists.txt); on a machine without a GPU its CUDA LibTorch runs on the CPU.
#    MPIBERT_VENV names another environment; a cluster's own LibTorch is given to CMake instead
#    (-DTorch_DIR or -DCMAKE_PREFIX_PATH) and this part is skipped with MPIBERT_SKIP_TORCH=1.
# python3-matplotlib (for /usr/bin/python3) draws results/compare's plots.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version=2.11.0
packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev
  nlohmann-json3-dev libutf8proc-dev zlib1g-dev
  libprotobuf-dev protobuf-compiler
  python3-venv python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${MPIBERT_SKIP_TORCH:-0}" = 1 ] && exit 0
venv=${MPIBERT_VENV:-.venv}
installed=$("$venv/bin/python3" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "${installed%%+*}" = "$torch_version" ]; then
  echo "install-deps: torch $installed in $venv"
  exit 0
fi
echo "install-deps: installing torch==$torch_version from PyPI into $venv (about 4.5 GB with its CUDA libraries)"
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv" || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python3" -m pip install -q --disable-pip-version-check "torch==$torch_version"
"$venv/bin/python3" -c 'import torch; print("install-deps: torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null
