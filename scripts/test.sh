#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test suite (GoogleTest + multi-rank mpiexec
# tests), then every fuzz harness for 30 s under ASan + UBSan after replaying its corpus
# (scripts/fuzz.sh; the sanitizer runs of the suites are scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --with-sanitizers
bash scripts/build.sh
source scripts/env.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
bash scripts/fuzz.sh all 30
