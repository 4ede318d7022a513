#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test suite (GoogleTest + multi-rank mpiexec
# tests), then every fuzz harness for 10 s under ASan + UBSan after replaying its corpus
# (scripts/fuzz.sh; the sanitizer runs of the suites are scripts/sanitize.sh).
#   scripts/test.sh            everything, as CI and the README run it
#   scripts/test.sh --fast     a developer's loop: build, then the unit and ranks tiers (no install, no fuzzing)
#   scripts/test.sh -L LABEL   build, then the tests of one label: a layer (text, data, ...) or a tier
#                              (unit, ranks, e2e, system); ctest's regular expression (docs/testing.md)
set -euo pipefail
cd "$(dirname "$0")/.."
labels=""
case "${1:-}" in
  --fast) labels='^(unit|ranks)$' ;;
  -L) [ $# -eq 2 ] || { echo "usage: scripts/test.sh [--fast | -L LABEL]" >&2; exit 2; }; labels=$2 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast | -L LABEL]" >&2; exit 2 ;;
esac
if [ -n "$labels" ]; then
  bash scripts/build.sh
  source scripts/env.sh
  cd build && exec ctest --output-on-failure -j "$(nproc)" --timeout 900 -L "$labels"
fi
bash scripts/install-deps.sh --with-sanitizers
bash scripts/build.sh
source scripts/env.sh
# The harnesses' sanitizer build runs beside the suites at the lowest priority: it takes the cores
# the suites leave idle (their multi-host, SLURM and namespace tests wait on links and daemons).
# In a session of its own, so that a failing suite stops the whole build with it; a new session is
# a scheduling group of its own where the kernel groups by session (autogroup), so the group itself
# is set to the lowest priority too (nice alone would rank it only within the group).
setsid bash -c 'echo 19 > /proc/self/autogroup 2> /dev/null; exec nice -n 19 bash scripts/fuzz.sh --build-only all' \
  > /dev/null 2>&1 &
harnesses=$!
trap 'kill -- "-$harnesses" 2> /dev/null || true' EXIT
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
wait "$harnesses" || { tail -50 build-asan.log; echo "test.sh: the fuzz harnesses' build failed (build-asan.log, above)"; exit 1; }
trap - EXIT
bash scripts/fuzz.sh all 10
