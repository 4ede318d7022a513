#!/usr/bin/env bash
# A communicator split from the world times out in one group (tests/test_comm_split.cpp's disabled
# test, on 3 ranks): the whole job must end, promptly, with that group's message, the rank of the
# other group (waiting in the world's barrier with no timeout of its own) included.
#   tests/test_comm_split_failure.sh TEST_BINARY MPIEXEC
set -euo pipefail
binary=${1:?usage: test_comm_split_failure.sh TEST_BINARY MPIEXEC}
mpiexec=${2:?usage: test_comm_split_failure.sh TEST_BINARY MPIEXEC}
start=$(date +%s)
status=0
output=$(timeout -k 5 90 "$mpiexec" -n 3 --oversubscribe --bind-to none "$binary" --gtest_also_run_disabled_tests \
  --gtest_filter='CommSplitFailure.*' 2>&1) || status=$?
elapsed=$(( $(date +%s) - start ))
fail() { echo "test_comm_split_failure: $1"; echo "$output" | tail -30; exit 1; }
[ "$status" -ne 0 ] || fail "the job exited 0"
[ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "the job was still running after 90 s (timeout's status $status)"
grep -q "collective timed out after 3 s (--collective-timeout 3) on rank 0.*all-reduce in group 0 that rank 1 never joins" \
  <<< "$output" || fail "no timeout report from rank 0's group"
[ "$elapsed" -le 30 ] || fail "the job took ${elapsed} s to end"
echo "test_comm_split_failure: the job ended with status $status in ${elapsed} s, with rank 0's group's report"
