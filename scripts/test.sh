#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test suite (GoogleTest + multi-rank mpiexec tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --with-reports
bash scripts/build.sh
source scripts/env.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
