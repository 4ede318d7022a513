#!/usr/bin/env bash
# ctest build.install: an installed mpibert that does not depend on the tree it was built in.
#   1. `cmake --install BUILD --prefix P` into a temporary P puts the programs, libraries, public
#      headers, the package config, the modulefile, the wheel's libraries the programs load (with
#      the wheels' licenses), LICENSE and the third-party notices where docs/layout.md says; no text
#      file installed names the checkout, and the programs' RUNPATH is relative to $ORIGIN for the
#      wheel's libraries and names neither the checkout nor its .venv;
#   2. P is moved, and in a private mount namespace the checkout's .venv (and the Python
#      environment the build took LibTorch from) is hidden under an empty tmpfs. There:
#      - the moved programs print their version, ldd finds every library they need and none in the
#        checkout, scripts/check_runpath.py finds the CUDA libraries in P's copies, and the moved
#        mpibert-prep reads Parquet through P's copies of the pyarrow wheel's libarrow and libparquet;
#      - tests/consumer, a project of its own, configured with CMAKE_PREFIX_PATH at the moved P,
#        finds the package, builds against mpibert::text, mpibert::eval and mpibert::model, and
#        tokenizes a question, scores an answer and builds the small BERT with the numbers expected;
#      - Debian's Lmod (installed when missing) loads P's modulefile (`module use P/share/modulefiles;
#        module load mpibert`): mpibert is then the moved P's, and the main job (scripts/main_job.sh's
#        preparation, and its training on 2 ranks cut to its first 8 steps, then evaluated) runs
#        through the module's mpibert-prep and mpibert;
#      - a dependency missing, find_package(mpibert QUIET) lets the configure go on with
#        mpibert_FOUND false and REQUIRED stops it naming the dependency;
#   3. that short run's EM, F1 and trained weights are bit for bit those of build/bin/mpibert's
#      same run on the same shards (the whole main job's figures are the README's own run).
# The namespace needs root (or unprivileged user namespaces), and Lmod's installation root: exit 77
# (ctest's skip) with the reason otherwise.
#   tests/test_install.sh BUILD_DIR   (KEEP_TMP=1 keeps the temporary directory)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:?usage: tests/test_install.sh BUILD_DIR}" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 77; }
python=$(sed -n 's/^MPIBERT_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt")
venvs=("$root/.venv")
if [ -n "$python" ] && [ "$(dirname "$(dirname "$python")")" != "$root/.venv" ]; then venvs+=("$(dirname "$(dirname "$python")")"); fi
# The namespace that hides them: root's own, or a user namespace mapping this user to root.
if [ "$(id -u)" -eq 0 ]; then
  namespace=(unshare --mount --propagation private)
elif unshare --map-root-user --mount true 2> /dev/null; then
  namespace=(unshare --map-root-user --mount --propagation private)
else
  skip "hiding the checkout's .venv needs a mount namespace: root, or unprivileged user namespaces (CI runs as root)"
fi
lmod_init=/usr/share/lmod/lmod/init/bash
if [ ! -f "$lmod_init" ]; then
  [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null ||
    skip "Debian's lmod is not installed, and installing it needs root and apt"
  echo "installing Debian's lmod (the modulefile's test)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lmod > /dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lmod; } ||
    fail "apt-get install lmod"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/mpibert-install.XXXXXX")
cleanup() {
  local status=$?
  if [ "${KEEP_TMP:-0}" = 1 ] || [ "$status" -ne 0 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
chmod 755 "$work"
prefix=$work/prefix
start=$(date +%s)

# --- 1. the install ------------------------------------------------------------------------------
cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 || { cat "$work/install.log"; fail "cmake --install $build"; }
for f in bin/mpibert bin/mpibert-prep lib/libmpibert_core.a lib/libmpibert_train.a lib/libmpibert_cli.a \
         include/mpibert/text/hf_tokenizer.hpp include/mpibert/train/trainer.hpp \
         lib/cmake/mpibert/mpibertConfig.cmake lib/cmake/mpibert/mpibertConfigVersion.cmake \
         lib/cmake/mpibert/mpibertTargets.cmake share/doc/mpibert/LICENSE share/doc/mpibert/THIRD_PARTY_NOTICES.md \
         share/modulefiles/mpibert/0.1.0.lua lib/mpibert/wheel/torch/lib/libtorch_cpu.so \
         lib/mpibert/wheel/torch/include/torch/csrc/api/include/torch/torch.h; do
  [ -e "$prefix/$f" ] || fail "$prefix/$f not installed"
done
[ ! -e "$prefix/lib/mpibert/wheel/torch/include/fmt" ] || fail "LibTorch's own fmt headers were installed"
ls "$prefix"/share/doc/mpibert/wheels/torch-*/LICENSE > /dev/null 2>&1 || fail "torch's license is not in $prefix/share/doc/mpibert/wheels"
for library in libarrow libparquet; do
  ls "$prefix/lib/mpibert/wheel/pyarrow/$library.so."[0-9]* > /dev/null 2>&1 || fail "pyarrow's $library is not in $prefix/lib/mpibert/wheel/pyarrow"
done
ls "$prefix"/share/doc/mpibert/wheels/pyarrow-*/LICENSE.txt > /dev/null 2>&1 || fail "pyarrow's license is not in $prefix/share/doc/mpibert/wheels"
grep -q "Apache License" "$prefix/share/doc/mpibert/LICENSE" || fail "the installed LICENSE is not the Apache License"
# Text files only (the wheel's libraries carry their own build paths in their strings).
named=$(grep -rlI -e "$root" "$prefix" --exclude-dir=wheel 2> /dev/null || true)
[ -z "$named" ] || fail "installed files name the checkout $root: $named"
for venv in "${venvs[@]}"; do
  real=$(cd "$venv" 2> /dev/null && pwd -P) || continue
  named=$(grep -rlI -e "$real" -e "$venv" "$prefix" --exclude-dir=wheel 2> /dev/null || true)
  [ -z "$named" ] || fail "installed files name the environment $venv: $named"
done
for program in mpibert mpibert-prep; do
  runpath=$(readelf -d "$prefix/bin/$program" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [[ ":$runpath:" == *':$ORIGIN/../lib/mpibert/wheel/torch/lib:'* && ":$runpath:" == *':$ORIGIN/../lib/mpibert/wheel/pyarrow:'* ]] ||
    fail "$program's RUNPATH does not name its prefix's copies of LibTorch and pyarrow's libraries: $runpath"
  [[ "$runpath" != *"$root"* && "$runpath" != *"/site-packages/"* ]] ||
    fail "$program's RUNPATH names the checkout or a Python environment: $runpath"
done
echo "installed: $(cd "$prefix" && find . -type f | wc -l) files, $(du -sh "$prefix" | cut -f1), in $((  $(date +%s) - start )) s;" \
  "RUNPATH $(readelf -d "$prefix/bin/mpibert" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"

# --- 2. moved, the .venv hidden ---------------------------------------------------------------------
moved=$work/moved
mv "$prefix" "$moved"
cat > "$work/inside.sh" <<'INSIDE'
set -euo pipefail
root=$1 work=$2 moved=$3 lmod_init=$4
shift 4
step=$(date +%s)
took() { local now; now=$(date +%s); echo "  ($(( now - step )) s)"; step=$now; }
for venv in "$@"; do
  real=$(cd "$venv" 2> /dev/null && pwd -P) || continue
  mount -t tmpfs -o size=1m,mode=755 tmpfs "$real"
  [ ! -e "$venv/bin/python3" ] || { echo "$venv still visible"; exit 1; }
done
echo "hidden: $*"
export LD_LIBRARY_PATH=
for program in mpibert mpibert-prep; do
  "$moved/bin/$program" --help > /dev/null || { echo "$moved/bin/$program --help failed"; exit 1; }
  problems=$(ldd "$moved/bin/$program" | grep -e "not found" -e "$root" || true)
  [ -z "$problems" ] || { echo "$program: $problems"; exit 1; }
done
echo "moved programs run: $("$moved/bin/mpibert" --version)"
python3 "$root/scripts/check_runpath.py" "$moved/bin/mpibert" --wheel-dir "$moved/lib/mpibert/wheel" > "$work/runpath.txt" 2>&1 ||
  { cat "$work/runpath.txt"; echo "check_runpath.py on the moved mpibert"; exit 1; }
# Parquet through the prefix's copies of libarrow and libparquet (a fuzz seed: 4 questions of dev-v1.1).
"$moved/bin/mpibert-prep" --input "$root/tests/fuzz/corpus/fuzz_squad_parquet/seed-v1.1-none.parquet" \
  --vocab "$root/data_prep/data/bert-base-uncased/vocab.txt" --out "$work/parquet-shards" > "$work/parquet.log" 2>&1 ||
  { cat "$work/parquet.log"; echo "the moved mpibert-prep on Parquet"; exit 1; }
grep -q "(Parquet, 1 file(s)): 1 articles, 4 questions" "$work/parquet.log" || { cat "$work/parquet.log"; echo "the moved mpibert-prep read no Parquet"; exit 1; }
echo "the moved mpibert-prep read Parquet through $(ldd "$moved/bin/mpibert-prep" | sed -n 's/.*libparquet[^ ]* => \([^ ]*\).*/\1/p')"
took

# A project of its own, through find_package. Built without optimization (no build type): what it
# checks is that the package's targets compile, link and run from the moved prefix, and optimizing
# LibTorch's headers would only lengthen the test.
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$work/CMakeCache.txt")
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$root/tests/consumer" -B "$work/consumer" "${generator[@]}" -DCMAKE_BUILD_TYPE= \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_PREFIX_PATH="$moved" > "$work/consumer-configure.log" 2>&1 ||
  { cat "$work/consumer-configure.log"; echo "configuring tests/consumer against $moved"; exit 1; }
grep -q "^mpibert_DIR:PATH=$moved/lib/cmake/mpibert$" "$work/consumer/CMakeCache.txt" ||
  { echo "tests/consumer found mpibert elsewhere than $moved: $(grep '^mpibert_DIR' "$work/consumer/CMakeCache.txt")"; exit 1; }
cmake --build "$work/consumer" > "$work/consumer-build.log" 2>&1 ||
  { tail -40 "$work/consumer-build.log"; echo "building tests/consumer against $moved"; exit 1; }
"$work/consumer/consumer" "$root/data_prep/data/bert-base-uncased/vocab.txt" "$root/configs/small-bert.json" \
  "Where is the Eiffel Tower?" "the Eiffel Tower" "Eiffel Tower in Paris" > "$work/consumer.txt" 2>&1 ||
  { cat "$work/consumer.txt"; echo "tests/consumer failed"; exit 1; }
# bert-base-uncased's WordPiece (HF's BertTokenizerFast gives the same); evaluate-v1.1.py's F1 of
# "eiffel tower" in "eiffel tower in paris" (precision 1/2, recall 1); the small BERT's
# parameters: embeddings 3,972,864 + 2 layers of 198,272 + the QA head's 258.
expected="tokens: where is the e ##iff ##el tower ?
score: exact 0 f1 0.666667
parameters: 4369666"
[ "$(cat "$work/consumer.txt")" = "$expected" ] ||
  { echo "tests/consumer printed"; cat "$work/consumer.txt"; echo "expected"; echo "$expected"; exit 1; }
echo "tests/consumer, built with find_package(mpibert) against $moved, printed: $(tr '\n' ';' < "$work/consumer.txt")"
took

# The modulefile, through Debian's Lmod, and the main job through it.
set +u
source "$lmod_init"
module use "$moved/share/modulefiles"
module load mpibert
set -u
[ "$(command -v mpibert)" = "$moved/bin/mpibert" ] || { echo "after module load, mpibert is $(command -v mpibert)"; exit 1; }
[ "$MPIBERT_ROOT" = "$moved" ] || { echo "MPIBERT_ROOT is $MPIBERT_ROOT"; exit 1; }
whatis=$(module whatis mpibert 2>&1)
[[ "$whatis" == *"MPI: "*libmpi* && "$whatis" == *"HDF5: "* ]] || { echo "$whatis"; echo "whatis names no MPI or HDF5"; exit 1; }
echo "module load mpibert: mpibert is $(command -v mpibert), MPIBERT_ROOT=$MPIBERT_ROOT"
took
cd "$root"
source scripts/env.sh
MPIBERT_BIN_DIR=$(dirname "$(command -v mpibert-prep)") bash scripts/sample_shards.sh "$work/main" > "$work/prep.log" 2>&1 ||
  { cat "$work/prep.log"; echo "preparing the main job's shards with the module's mpibert-prep"; exit 1; }
echo "main job's shards prepared with the module's mpibert-prep"
took
mpirun -n 2 --bind-to none mpibert train --config configs/main_job.toml --max-steps 8 --train-shards "$work/main/shards/train" \
  --eval-shards "$work/main/shards/eval" --output-dir "$work/main/train" > "$work/train.log" 2>&1 ||
  { tail -30 "$work/train.log"; echo "the main job's training with the module's mpibert"; exit 1; }
grep -E "eval_exact_match|eval_f1" "$work/train.log"
took

# A dependency missing (the copy of libtorch_cpu.so moved away): find_package(mpibert QUIET) leaves
# the configure going with mpibert_FOUND false, REQUIRED stops it with the reason.
mkdir "$work/quiet"
printf 'cmake_minimum_required(VERSION 3.18)\nproject(q CXX)\nfind_package(mpibert CONFIG ${HOW})\nmessage("mpibert_FOUND=${mpibert_FOUND}")\n' \
  > "$work/quiet/CMakeLists.txt"
library=$moved/lib/mpibert/wheel/torch/lib/libtorch_cpu.so
mv "$library" "$library.away"
cmake -S "$work/quiet" -B "$work/quiet/quiet" -DHOW=QUIET -DCMAKE_PREFIX_PATH="$moved" > "$work/quiet.log" 2>&1 ||
  { cat "$work/quiet.log"; echo "find_package(mpibert QUIET) stopped the configure"; exit 1; }
grep -q "^mpibert_FOUND=0$" "$work/quiet.log" || { cat "$work/quiet.log"; echo "find_package(mpibert QUIET) found mpibert without libtorch_cpu.so"; exit 1; }
! grep -q "libtorch_cpu" "$work/quiet.log" || { cat "$work/quiet.log"; echo "find_package(mpibert QUIET) printed"; exit 1; }
if cmake -S "$work/quiet" -B "$work/quiet/required" -DHOW=REQUIRED -DCMAKE_PREFIX_PATH="$moved" > "$work/required.log" 2>&1 ||
   ! grep -q "copy of torch/lib/libtorch_cpu.so is missing" "$work/required.log"; then
  cat "$work/required.log"; echo "find_package(mpibert REQUIRED) did not stop naming libtorch_cpu.so"; exit 1
fi
mv "$library.away" "$library"
echo "without libtorch_cpu.so: find_package(mpibert QUIET) says not found, quietly; REQUIRED stops naming it"
INSIDE
cp "$build/CMakeCache.txt" "$work/CMakeCache.txt"
step=$(date +%s)
"${namespace[@]}" bash "$work/inside.sh" "$root" "$work" "$moved" "$lmod_init" "${venvs[@]}" ||
  fail "the moved install with the .venv hidden (above)"
echo "moved install, consumer, module and main job: $(( $(date +%s) - step )) s"

# --- 3. the same run as the build tree's ----------------------------------------------------------
outcome() {
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(repr(r["eval_exact_match"]), repr(r["eval_f1"]))' "$1/results.json"
  sha256sum < "$1/model.safetensors"
}
(source "$root/scripts/env.sh" && cd "$root" &&
  mpirun -n 2 --bind-to none "$build/bin/mpibert" train --config configs/main_job.toml --max-steps 8 --train-shards "$work/main/shards/train" \
    --eval-shards "$work/main/shards/eval" --output-dir "$work/main/reference" > "$work/reference.log" 2>&1) ||
  { tail -30 "$work/reference.log"; fail "the build tree's mpibert on the same shards"; }
got=$(outcome "$work/main/train") want=$(outcome "$work/main/reference")
[ "$got" = "$want" ] || fail "8 steps of the main job through the module: EM F1, weights $got; the build tree's mpibert: $want"
echo "8 steps of the main job through the module: EM, F1 = $(head -1 <<< "$got") and the trained weights, as the build tree's mpibert gives"
echo "build.install: $(( $(date +%s) - start )) s"
