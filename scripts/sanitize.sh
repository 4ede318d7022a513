#!/usr/bin/env bash
# The test suites under sanitizers, built with clang (scripts/build.sh --asan / --tsan).
#   scripts/sanitize.sh address   AddressSanitizer + UndefinedBehaviorSanitizer (leaks included):
#                                 every GoogleTest suite and the multi-rank suites on 1-3 ranks
#   scripts/sanitize.sh thread    ThreadSanitizer: the communicator (its worker thread and its
#                                 teardown), DataParallel (hooks, buckets, overlap) on 1-3 ranks,
#                                 BatchLoader's helper thread, and the probe ports' listeners
# LibTorch, Open MPI and HDF5 are not instrumented; what is reported from them is filtered by
# tests/sanitizers/*.supp, each entry with its reason. Any other report fails its test. Prints
# ctest's summary; exit 1 when a test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  address)
    bash scripts/build.sh --asan
    dir=build-asan
    # The programs the scripted tests drive (SLURM, test hosts, reports, the build itself) are
    # covered by the suites they run; they stay in the plain build.
    select=(-E '^(build|slurm|cluster|compare|gpu_check|model\.convert|data\.get_squad|docs|layers|tools|fixtures|chaos)\.') ;;
  thread)
    bash scripts/build.sh --tsan test_comm test_comm_teardown test_data_parallel test_batching test_peers test_probe_port
    dir=build-tsan
    select=(-R '^(comm|comm_teardown|data_parallel|peers)\.ranks|^BatchLoading\.|^ProbePort\.') ;;
  *) echo "usage: scripts/sanitize.sh address|thread" >&2; exit 2 ;;
esac
source scripts/env.sh
source scripts/sanitizer_env.sh
cd "$dir"
ctest "${select[@]}" -j "$(nproc)" --timeout 1800 --output-on-failure
