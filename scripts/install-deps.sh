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
else
  echo "install-deps: installing torch==$torch_version from PyPI into $venv (about 4.5 GB with its CUDA libraries)"
  [ -x "$venv/bin/python3" ] || python3 -m venv "$venv" || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "torch==$torch_version"
  "$venv/bin/python3" -c 'import torch; print("install-deps: torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null
fi

# Headers that LibTorch's CUDA headers need through the CUDA runtime's (cuda_runtime.h includes
# crt/host_config.h, cuda_fp16.h includes nv/target) ship in nvidia-cuda-crt and nvidia-cuda-cccl,
# not in the wheels torch depends on: with them the build needs no CUDA toolkit
# (scripts/libtorch_wheel.cmake). Their release is the wheel's CUDA version (13.0.* for torch
# 2.11.0). Read from the package's files: importing torch would load every CUDA library.
header_wheels=$("$venv/bin/python3" - <<'PY'
import importlib.util, os, re
torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
cuda = re.search(r"^cuda.*'([0-9.]+)'", open(os.path.join(torch_dir, "version.py")).read(), re.M)
if cuda:
    include = os.path.join(os.path.dirname(torch_dir), "nvidia", "cu" + cuda.group(1).split(".")[0], "include")
    for wheel, header in (("nvidia-cuda-crt", "crt/host_config.h"), ("nvidia-cuda-cccl", "nv/target")):
        if not os.path.exists(os.path.join(include, header)):
            print(f"{wheel}=={cuda.group(1)}.*")
PY
)
if [ -n "$header_wheels" ]; then
  echo "install-deps: installing" $header_wheels "(CUDA headers for building without a toolkit) into $venv"
  # shellcheck disable=SC2086
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check --no-deps $header_wheels
fi
