#!/usr/bin/env bash
# Installs what mpibert needs, only what is missing, one of two ways:
#  - with apt, as root or through sudo (Debian 12, Ubuntu): Debian packages (without recommends):
#    compilers, CMake, Open MPI, HDF5, spdlog, CLI11, GoogleTest...; with --with-sanitizers also
#    clang and its sanitizer and libFuzzer runtimes (scripts/fuzz.sh, scripts/sanitize.sh) and
#    clang-format (the test that the sources follow .clang-format);
#  - without root or without apt (a cluster's login node, the site's modules for the compiler,
#    CMake, MPI and HDF5 loaded; or --no-root): never calls sudo or apt. It checks what the build
#    needs the way the build finds it (cmake/probe: the build's own find_package, pkg-config and
#    mpicc searches), names what is missing and where it looked, and downloads the release
#    archives of the small libraries that are missing (spdlog, fmt, CLI11, nlohmann-json,
#    utf8proc, PCRE2: cmake/pinned_dependencies.cmake, their SHA-256 checked) into
#    MPIBERT_DEPENDENCY_ARCHIVES (default .deps/), from which the build builds them, network or not.
# Both ways then install into the project's virtual environment .venv/:
#  - LibTorch: PyTorch's wheel from PyPI (torch==2.11.0, the version of the GPU image, built for
#    CUDA 13.0 with cuDNN, NCCL and Kineto). The build finds it there (CMakeLists.txt); on a
#    machine without a GPU its CUDA LibTorch runs on the CPU. MPIBERT_VENV names another
#    environment (relative to the repository root, or absolute), which the build (CMakeLists.txt)
#    and the tools' launchers (tools/launch.sh) read too; a cluster's own LibTorch is given to CMake instead (-DTorch_DIR or
#    -DCMAKE_PREFIX_PATH) and this part is skipped with MPIBERT_SKIP_TORCH=1.
#  - Apache Arrow's C++ libraries and headers: PyPI's pyarrow wheel (pyarrow==25.0.1), whose
#    libarrow and libparquet the Parquet reader links (scripts/arrow_wheel.cmake); installed with
#    MPIBERT_SKIP_TORCH=1 too.
#  - the analysis tools (tools/: tools/compare, tools/scaling-model) as the package mpibert-tools,
#    with matplotlib and PyYAML from PyPI at the versions of tools/constraints.txt, and its
#    trackers' part (mpibert-report: W&B's SDK wandb, MLflow's client) with MLflow's tracking server
#    (mlflow: the tests start one), at the versions pinned there too.
# On a fresh machine PyPI's download (about 4.5 GB) runs while apt installs the Debian packages.
#   scripts/install-deps.sh [--no-root] [--with-sanitizers]
# (--with-reports, which installed Debian's python3-matplotlib, is still accepted: the tools and
# their plotting now always come from PyPI into .venv.)
set -euo pipefail
cd "$(dirname "$0")/.."

torch_version=2.11.0
# The newest pyarrow that MLflow's pinned server (tools/constraints.txt) allows. Arrow's C++ headers
# are C++20: the Parquet reader alone is compiled so.
pyarrow_version=25.0.1
packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev
  nlohmann-json3-dev libutf8proc-dev libpcre2-dev zlib1g-dev
  libprotobuf-dev protobuf-compiler libcurl4-openssl-dev
  python3-venv
)
no_root=0
for option in "$@"; do
  case "$option" in
    --no-root) no_root=1 ;;
    --with-reports) ;;
    --with-sanitizers) packages+=(clang libclang-rt-dev clang-format) ;;
    *) echo "usage: scripts/install-deps.sh [--no-root] [--with-sanitizers]" >&2; exit 2 ;;
  esac
done

# The packages named that dpkg does not have installed, one a line.
not_installed() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# apt when it is there and usable: as root, through sudo, or with nothing to install.
SUDO=""
mode=apt
missing=()
if [ $no_root = 1 ]; then
  mode=user why="--no-root"
elif ! command -v apt-get > /dev/null || ! command -v dpkg-query > /dev/null; then
  mode=user why="no apt-get or dpkg-query here"
else
  mapfile -t missing < <(not_installed "${packages[@]}")
  if [ "$(id -u)" -ne 0 ] && [ ${#missing[@]} -gt 0 ]; then
    if ! command -v sudo > /dev/null; then
      mode=user why="not root, and no sudo"
    elif sudo -n true 2> /dev/null || { [ -t 0 ] && sudo -v; }; then
      SUDO=sudo
    else
      mode=user why="not root, and sudo refused"
    fi
  fi
fi
[ $mode = apt ] || echo "install-deps: without root or apt ($why): nothing is installed system-wide"

export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_install() {
  [ $apt_updated = 1 ] || { $SUDO apt-get update -qq; apt_updated=1; }
  $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

venv=${MPIBERT_VENV:-.venv}
want_torch=1
[ "${MPIBERT_SKIP_TORCH:-0}" = 1 ] && want_torch=0
installed=$("$venv/bin/python3" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ $want_torch = 1 ] && [ "${installed%%+*}" = "$torch_version" ]; then
  echo "install-deps: torch $installed in $venv"
  want_torch=0
fi

# torch from PyPI, in the background: the venv first (Debian's python3 needs python3-venv for it).
torch_pid=""
torch_log=$(mktemp "${TMPDIR:-/tmp}/install-torch.XXXXXX")
# A failing apt ends the script: the download goes with it.
trap 'rm -f "$torch_log"; [ -z "$torch_pid" ] || kill "$torch_pid" 2>/dev/null || true' EXIT
if [ ! -x "$venv/bin/python3" ]; then
  # Debian's python3 makes environments only with python3-venv (ensurepip): that package first.
  if [ $mode = apt ] && ! python3 -c 'import ensurepip, venv' 2>/dev/null && [[ " ${missing[*]} " == *" python3-venv "* ]]; then
    echo "install-deps: installing python3-venv (for $venv)"
    apt_install python3-venv
  fi
  python3 -m venv "$venv" || /usr/bin/python3 -m venv "$venv" || {
    echo "install-deps: cannot make the virtual environment $venv with $(command -v python3): a Python 3.10 or newer" \
         "with venv and ensurepip is needed (a site's Python module, or Debian's python3-venv)" >&2
    exit 1
  }
fi
if [ $want_torch = 1 ]; then
  echo "install-deps: installing torch==$torch_version from PyPI into $venv (about 4.5 GB with its CUDA libraries), in the background"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "torch==$torch_version" > "$torch_log" 2>&1 &
  torch_pid=$!
fi

if [ $mode = apt ]; then
  mapfile -t remaining < <(not_installed "${missing[@]}")  # python3-venv may be in by now
  if [ ${#remaining[@]} -eq 0 ]; then
    echo "install-deps: Debian packages present"
  else
    echo "install-deps: installing ${remaining[*]}"
    apt_install "${remaining[@]}"
  fi
else
  # The tools the build runs, then the libraries, searched for by the build's own code.
  problems=()
  if ! command -v cmake > /dev/null; then
    problems+=("cmake (3.18 or newer) is not on PATH: load the site's CMake module")
  else
    cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')
    printf '%s\n' 3.18 "$cmake_version" | sort -V -C ||
      problems+=("cmake $cmake_version ($(command -v cmake)) is older than 3.18: load a newer CMake module")
  fi
  for compiler in "${CC:-cc}" "${CXX:-c++}"; do
    command -v "$compiler" > /dev/null ||
      problems+=("no compiler $compiler on PATH (CC/CXX, or the site's GCC module: C++17, GCC 9 or newer)")
  done
  command -v ninja > /dev/null || echo "install-deps: no ninja on PATH: scripts/build.sh uses make"
  if [ ${#problems[@]} -eq 0 ]; then
    probe=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-probe.XXXXXX")
    cmake -S cmake/probe -B "$probe" -DMPIBERT_PROBE_REPORT="$probe/report.txt" \
      ${MPIBERT_DEPENDENCY_ARCHIVES:+-DMPIBERT_DEPENDENCY_ARCHIVES="$MPIBERT_DEPENDENCY_ARCHIVES"} > "$probe/configure.log" 2>&1 ||
      { cat "$probe/configure.log" >&2; rm -rf "$probe"; echo "install-deps: cmake/probe failed (above)" >&2; exit 1; }
    sed 's/^/install-deps: /' "$probe/report.txt"
    mapfile -t absent < <(sed -n 's/^missing: //p' "$probe/report.txt")
    problems+=("${absent[@]}")
    mapfile -t to_build < <(sed -n 's/^build: \([^ ]*\) .*/\1/p' "$probe/report.txt")
    rm -rf "$probe"
    if [ ${#to_build[@]} -gt 0 ]; then
      archives=${MPIBERT_DEPENDENCY_ARCHIVES:-$PWD/.deps}
      names=$(IFS=';'; echo "${to_build[*]}")
      echo "install-deps: the release archives of ${to_build[*]} into $archives (cmake/pinned_dependencies.cmake)"
      cmake -DMPIBERT_DEPENDENCY_ARCHIVES="$archives" -DNAMES="$names" -P cmake/pinned_dependencies.cmake 2>&1 |
        sed 's/^/install-deps: /' || problems+=("the release archives of ${to_build[*]} (above)")
    fi
  fi
  if [ ${#problems[@]} -gt 0 ]; then
    echo "install-deps: missing, so the build would stop:" >&2
    printf '  %s\n' "${problems[@]}" >&2
    exit 1
  fi
  echo "install-deps: what the build needs is here"
fi

if [ -n "$torch_pid" ]; then
  status=0
  wait "$torch_pid" || status=$?
  torch_pid=""
  if [ $status -ne 0 ]; then
    cat "$torch_log" >&2
    echo "install-deps: pip install torch==$torch_version failed (above)" >&2
    exit 1
  fi
  "$venv/bin/python3" -c 'import torch; print("install-deps: torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null
fi

# Apache Arrow's libarrow, libparquet and their headers, for the Parquet reader (the build links
# them from the wheel and `cmake --install` copies them, as PyTorch's).
if ! "$venv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(m.version('pyarrow') != '$pyarrow_version')" 2>/dev/null; then
  echo "install-deps: installing pyarrow==$pyarrow_version into $venv (Apache Arrow's C++ libraries, for reading Parquet)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "pyarrow==$pyarrow_version"
else
  echo "install-deps: pyarrow $pyarrow_version in $venv"
fi

# The analysis tools, editable: the launchers in tools/ and the console scripts run this
# checkout's code with the plotting libraries pinned in tools/constraints.txt; with the trackers'
# part (mpibert-report: wandb, MLflow's client) and MLflow's server, which the tests run.
if ! "$venv/bin/python3" - tools/constraints.txt <<'PY' 2>/dev/null
import importlib.metadata as m, sys
m.version("mpibert-tools")
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        assert m.version(name) == version, name
PY
then
  echo "install-deps: installing the analysis tools (tools/, mpibert-tools), their plotting libraries, wandb and mlflow into $venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -c tools/constraints.txt setuptools -e './tools[trackers]' mlflow
fi
[ "${MPIBERT_SKIP_TORCH:-0}" = 1 ] && exit 0

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

# transformers, at the HF peer's release (bench/hf_peer/requirements.txt): ctest model.hf_pipeline
# loads mpibert's run directories with its pipeline("question-answering").
transformers_version=$(sed -n 's/^transformers==//p' bench/hf_peer/requirements.txt)
if ! "$venv/bin/python3" -c "import importlib.metadata as m, sys; sys.exit(m.version('transformers') != '$transformers_version')" 2>/dev/null; then
  echo "install-deps: installing transformers $transformers_version into $venv (ctest model.hf_pipeline runs HF's pipeline)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "transformers==$transformers_version" "torch==$torch_version"
fi

# TensorBoard's own reader: the tests read the events files mpibert writes with it
# (tests/read_tensorboard.py: the options as text and hparams, as TensorBoard shows them).
if ! "$venv/bin/python3" -c 'import tensorboard' 2>/dev/null; then
  echo "install-deps: installing tensorboard into $venv (the tests read mpibert's events with it)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check tensorboard
fi
