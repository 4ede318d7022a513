#!/usr/bin/env bash
# ctest cluster.probes: the probe ports that name a lost rank, across test hosts
# (tests/cluster/hosts.sh): test_peers with one rank per host, Open MPI over TCP.
#   1. 2 hosts on one subnet: each rank's port listens on its subnet address (not loopback, not
#      every interface), gives connections from the other host that cannot prove the job's token
#      nothing (a nonce at most), and answers that host's probes;
#   2. 3 hosts where h1 and h2 are multi-homed: they share a second subnet, name each other by
#      their addresses there, and h3 has no route to it. h1 and h2 must listen on both their
#      addresses (the one towards each other host), and every probe must be answered, h3's too.
# Needs root (network namespaces): skipped (77) without it. Environment: MPIBERT_BIN_DIR
# (default build/bin), KEEP_TMP=1 keeps the temporary directory.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/env.sh"
export OMP_NUM_THREADS=1
bin=${MPIBERT_BIN_DIR:-$root/build/bin}
hosts_sh=$root/tests/cluster/hosts.sh
start_time=$(date +%s)
say() { echo "[cluster.probes $(( $(date +%s) - start_time ))s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# 77 is ctest's skip code for this test (SKIP_RETURN_CODE): without root there are no test hosts.
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: the test hosts (network namespaces) need root; CI runs as root"; exit 77; }
[ -x "$bin/test_peers" ] || fail "$bin/test_peers not built (bash scripts/build.sh test_peers)"

work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-probes.XXXXXX")
hosts=$work/hosts
cleanup() {
  local status=$?
  bash "$hosts_sh" down "$hosts"
  if [ "${KEEP_TMP:-0}" = 1 ] || [ "$status" -ne 0 ]; then echo "kept $work"; else rm -rf "$work"; fi
  say "done: $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 1' INT TERM

peer_tests_across() {  # N [K]: test_peers on hosts h1..hN (h1..hK multi-homed), one rank each
  local n=$1 log=$work/peers-$1-hosts.log
  bash "$hosts_sh" up "$hosts" "$@" || fail "the test hosts did not come up"
  bash "$hosts_sh" mpirun "$hosts" "$n" "$bin/test_peers --gtest_color=no" > "$log" 2>&1 ||
    { cat "$log"; fail "test_peers across $n hosts"; }
  grep -q "Data for node: h$n" "$log" || { cat "$log"; fail "mpirun's map has no rank on h$n"; }
  grep -Eq "^\[  PASSED  \] [0-9]+ tests" "$log" || { cat "$log"; fail "test_peers across $n hosts: no tests passed"; }
  bash "$hosts_sh" down "$hosts"
}

say "2 hosts on one subnet"
peer_tests_across 2
say "2 hosts: ports on the subnet's addresses, strangers given nothing, probes answered"
say "3 hosts, h1 and h2 on a second subnet that h3 has no route to"
peer_tests_across 3 2
say "3 hosts on two subnets: every rank's probes answered, h3's included"
