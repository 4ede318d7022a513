#!/usr/bin/env bash
# ctest build.install: mpibert installed like a CMake package and linked from another project.
#   1. `cmake --install BUILD --prefix P` into a temporary P puts the programs, libraries, public
#      headers, the package config (mpibertConfig.cmake, mpibertConfigVersion.cmake), LICENSE and
#      the third-party notices where docs/layout.md says;
#   2. P/bin/mpibert --help and P/bin/mpibert-prep --help run from P with no LD_LIBRARY_PATH (their
#      RUNPATH finds LibTorch, MPI, HDF5), and P/bin/mpibert passes scripts/check_runpath.py;
#   3. tests/consumer, a project of its own, configured with CMAKE_PREFIX_PATH=P finds mpibert with
#      find_package, builds against mpibert::text and mpibert::model, and tokenizes a question and
#      builds the small BERT with the numbers expected.
#   tests/test_install.sh BUILD_DIR   (KEEP_TMP=1 keeps the temporary directory)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:?usage: tests/test_install.sh BUILD_DIR}" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-install.XXXXXX")
cleanup() {
  local status=$?
  if [ "${KEEP_TMP:-0}" = 1 ] || [ "$status" -ne 0 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
prefix=$work/prefix

# --- 1. the install ------------------------------------------------------------------------------
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install $build"; }
for f in bin/mpibert bin/mpibert-prep lib/libmpibert_core.a lib/libmpibert_train.a lib/libmpibert_cli.a \
         include/mpibert/text/tokenizer.hpp include/mpibert/train/trainer.hpp \
         lib/cmake/mpibert/mpibertConfig.cmake lib/cmake/mpibert/mpibertConfigVersion.cmake \
         lib/cmake/mpibert/mpibertTargets.cmake share/doc/mpibert/LICENSE share/doc/mpibert/THIRD_PARTY_NOTICES.md; do
  [ -e "$prefix/$f" ] || fail "$prefix/$f not installed"
done
grep -q "Apache License" "$prefix/share/doc/mpibert/LICENSE" || fail "the installed LICENSE is not the Apache License"
echo "installed: $(cd "$prefix" && find . -type f | wc -l) files in $prefix"

# --- 2. the installed programs run from the prefix -------------------------------------------------
for program in mpibert mpibert-prep; do
  env -u LD_LIBRARY_PATH "$prefix/bin/$program" --help > "$work/$program-help.txt" 2>&1 ||
    { cat "$work/$program-help.txt"; fail "$prefix/bin/$program --help failed"; }
  grep -qi "usage" "$work/$program-help.txt" || { cat "$work/$program-help.txt"; fail "$program --help printed no usage"; }
  runpath=$(readelf -d "$prefix/bin/$program" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ -n "$runpath" ] || fail "$prefix/bin/$program has no RUNPATH"
  [[ ":$runpath:" != *":$build"* ]] || fail "$prefix/bin/$program's RUNPATH names the build tree: $runpath"
done
/usr/bin/python3 "$root/scripts/check_runpath.py" "$prefix/bin/mpibert" > "$work/runpath.txt" 2>&1 ||
  { cat "$work/runpath.txt"; fail "check_runpath.py on the installed mpibert"; }
echo "installed programs run: mpibert --help, mpibert-prep --help; RUNPATH $(readelf -d "$prefix/bin/mpibert" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"

# --- 3. a project of its own links mpibert through find_package --------------------------------------
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$root/tests/consumer" -B "$work/consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_PREFIX_PATH="$prefix" > "$work/consumer-configure.log" 2>&1 ||
  { cat "$work/consumer-configure.log"; fail "configuring tests/consumer against $prefix"; }
grep -q "^mpibert_DIR:PATH=$prefix/lib/cmake/mpibert$" "$work/consumer/CMakeCache.txt" ||
  fail "tests/consumer found mpibert elsewhere than $prefix: $(grep '^mpibert_DIR' "$work/consumer/CMakeCache.txt")"
cmake --build "$work/consumer" > "$work/consumer-build.log" 2>&1 ||
  { tail -40 "$work/consumer-build.log"; fail "building tests/consumer against $prefix"; }
env -u LD_LIBRARY_PATH "$work/consumer/consumer" "$root/data_prep/data/bert-base-uncased/vocab.txt" \
  "$root/configs/small-bert.json" "Where is the Eiffel Tower?" > "$work/consumer.txt" 2>&1 ||
  { cat "$work/consumer.txt"; fail "tests/consumer failed"; }
# bert-base-uncased's WordPiece (HF's BertTokenizerFast gives the same); the small BERT's
# parameters: embeddings 3,972,864 + 2 layers of 198,272 + the QA head's 258.
expected="tokens: where is the e ##iff ##el tower ?
parameters: 4369666"
[ "$(cat "$work/consumer.txt")" = "$expected" ] ||
  fail "tests/consumer printed
$(cat "$work/consumer.txt")
expected
$expected"
echo "tests/consumer, built with find_package(mpibert) against $prefix, printed: $(tr '\n' ';' < "$work/consumer.txt")"
