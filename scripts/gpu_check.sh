#!/usr/bin/env bash
# The one command a machine with an NVIDIA GPU runs, after `bash scripts/build.sh` or with a
# bundle of binaries built elsewhere (scripts/gpu_bundle.sh, for a bare machine without network):
#   1. what `mpibert env` sees; an NVIDIA driver (/proc/driver/nvidia) with no GPU visible to
#      mpibert is a failure (a driver older than CUDA 13's, CUDA_VISIBLE_DEVICES, a container
#      started without its GPUs), no driver at all is "nothing to check";
#   2. the GPU tests (test_gpu under mpiexec -n 1);
#   3. short training runs of the fixture's tiny BERT (6 steps of global batch 24, gradient
#      accumulation 2), each compared with what it must equal:
#        1 rank on the GPU                          against 1 rank on the CPU (max |w| difference)
#        2 and 3 ranks x {ddp, zero1, zero2, fsdp}  against 1 rank on the GPU, over NCCL (ranks
#          sharing the one GPU: NCCL's test mode MPIBERT_NCCL_SHARED_GPU, placement.hpp)
#        2 ranks x {ddp, zero2}, MPI on the GPU     against 1 rank on the GPU
#        2 ranks x {ddp, zero2, fsdp}, gradients    against 1 rank on the GPU (RMS weight difference:
#          reduced in bf16 (fsdp: gathers in bf16)    bf16's rounding, 2e-5 and 1e-4)
#        stopped at step 3 on 2 ranks, resumed on 3 against 1 rank on the GPU (resharding)
#        a run stopped at step 3 and resumed        against the uninterrupted run: bit for bit
#          with --deterministic, and the difference without it
#        fp16 on 2 ranks, one rank's gradient made   against 1 rank with the same skip (2e-3), and
#          non-finite at step 2                      every run skipped that step
#        a rank failing after backward, a rank killed (SIGKILL): the job ends, promptly
#        evaluation on the GPU                      against the CPU's, same checkpoint (EM/F1)
#        a profiled run                             its trace holds our phases (and GPU kernels)
#      printed as one table;
#   4. unless --skip-throughput, STEPS (100) bf16 steps of bert-base at batch BATCH (32) on the
#      bundled SQuAD v1.1 dev features, with full, dynamic and packed batches, packed with
#      --cuda-graphs, and distilbert-base packed beside them (samples/s over the whole run and
#      steady after the warm-up steps, MFU, peak GPU memory); the packed step's kernels per step,
#      GPU-busy time, gaps and top kernels, eager and graphed
#      (tools/mpibert_tools/kernel_accounting.py over a profiled window); and HF's Trainer on the
#      same GPU (bench/hf_peer/run_qa_peer.py throughput, full padding) unless --skip-peer.
# Exits 1 on any failed check. `--device cpu` runs steps 3 on the CPU in place of the GPU (ctest
# gpu_check.cpu), so that the script itself is tested where no GPU is. `--out DIR` copies the
# table, the throughput figures and a tarball of every log and results.json into DIR (4 files).
# `--skip-checks` leaves out steps 2 and 3 (a second look at the speeds).
#
# A bare machine without network (../shared/gpu-image/README.md) gets a bundle made by
# scripts/gpu_bundle.sh, with prebuilt binaries (bin/, lib/), the Debian packages to build from
# source (debs/), or both:
#   --bundle DIR          runs DIR/bin's binaries (against this machine's PyTorch, through
#                         LD_LIBRARY_PATH; refused when every user can write DIR, bin/ or lib/); a
#                         bundle without bin/ is built from source first
#   --build               builds from source, then runs the checks on what it built: the packages
#                         DIR/BUNDLE names, each checked against the SHA-256 recorded there (any
#                         other DIR/debs/*.deb, a changed one, or a bundle other users can write is
#                         refused), unpacked with dpkg -x into BUILD/deps, mpibert configured with
#                         CMAKE_PREFIX_PATH = python3's torch.utils.cmake_prefix_path (LibTorch's
#                         CMake config: needs the CUDA toolkit, /usr/local/cuda there) and
#                         BUILD/deps/usr, NCCL backend ON when nccl.h is found; mpibert,
#                         mpibert-prep and test_gpu built, nothing downloaded; LD_LIBRARY_PATH
#                         names BUILD/deps' libraries for the runs
#   --build-only          the same build, then stops (after checking that the programs' libraries
#                         resolve)
#   --unpack-only         the packages checked and unpacked into BUILD/deps, then stops
#   --build-dir BUILD     where (default build-gpu/; kept between calls: a rebuild is incremental,
#                         the configure fresh)
#   --target T, -DVAR=V   with --build-only: build T alone (repeatable), pass -DVAR=V to CMake
#                         (ctest build.gpu_bundle builds one target with -DMPIBERT_PCH=OFF)
# Paths are relative to the repository root.
#   scripts/gpu_check.sh [--device cuda|cpu] [--bundle DIR [--build | --build-only | --unpack-only] [--build-dir BUILD]
#                        [--target T]... [-DVAR=VALUE]...] [--out DIR] [--skip-checks] [--skip-throughput] [--skip-peer]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
device=cuda
throughput=1
peer=1
checks=1
bundle=
out=
build=none  # none, run (build, then the checks), only or unpack
build_dir="build-gpu"
targets=()
cmake_options=()
usage="usage: scripts/gpu_check.sh [--device cuda|cpu] [--bundle DIR [--build | --build-only | --unpack-only] [--build-dir BUILD] [--target T]... [-DVAR=VALUE]...] [--out DIR] [--skip-checks] [--skip-throughput] [--skip-peer]"
while [ $# -gt 0 ]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --build) [ "$build" != none ] || build=run; shift ;;
    --build-only) [ "$build" = unpack ] || build=only; shift ;;
    --unpack-only) build=unpack; shift ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    -D?*) cmake_options+=("$1"); shift ;;
    --out) out=$2; shift 2 ;;
    --skip-throughput) throughput=0; shift ;;
    --skip-peer) peer=0; shift ;;
    --skip-checks) checks=0; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
die() { echo "gpu_check: $*" >&2; exit 1; }
[ "$device" = cuda ] || [ "$device" = cpu ] || { echo "gpu_check: --device cuda or cpu" >&2; exit 2; }
if [ -n "$bundle" ]; then
  [ -d "$bundle" ] || die "bundle $bundle not found (scripts/gpu_bundle.sh DIR makes one; paths are relative to the repository root)"
  # Without binaries the bundle is for a build here.
  [ "$build" != none ] || [ -e "$bundle/bin/mpibert" ] || build=run
elif [ "$build" != none ]; then
  echo "gpu_check: --build, --build-only and --unpack-only take their packages from --bundle DIR" >&2; exit 2
fi
if [ ${#targets[@]} -gt 0 ] || [ ${#cmake_options[@]} -gt 0 ]; then
  # The checks need all three programs, built as the project builds them.
  [ "$build" = only ] || { echo "gpu_check: --target and -D options go with --build-only" >&2; exit 2; }
fi
[ ${#targets[@]} -gt 0 ] || targets=(mpibert mpibert-prep test_gpu)

# refuse_writable PATH...: dies when another user could change one of them (the bundle's
# packages and libraries end up on LD_LIBRARY_PATH and in the build).
refuse_writable() {
  local p
  for p in "$@"; do
    [ -z "$(find -L "$p" -maxdepth 0 -perm -o+w 2> /dev/null)" ] \
      || die "$p is writable by every user: anyone could put code into this run; chmod o-w it (scripts/gpu_bundle.sh leaves a bundle writable by its owner alone)"
  done
}

# unpack_debs: BUILD/deps from exactly the packages the bundle's manifest (BUNDLE) names, each
# copied out of the bundle first and unpacked only when the copy has the SHA-256 BUNDLE gives.
# Sets build_dir (absolute), prefix and debs.
unpack_debs() {
  local manifest=$bundle/BUNDLE f name hash rest got names=()
  local -A expected=()
  debs=$bundle/debs
  compgen -G "$debs/*.deb" > /dev/null || die "$debs holds no .deb$([ -e "$bundle/bin/mpibert" ] || echo ", nor $bundle/bin/mpibert"): make the bundle with scripts/gpu_bundle.sh (without --no-debs)"
  command -v dpkg > /dev/null || die "dpkg not found: it unpacks $debs"
  [ -f "$manifest" ] || die "$manifest missing: it names the packages to unpack (make the bundle again with scripts/gpu_bundle.sh)"
  refuse_writable "$bundle" "$manifest" "$debs"
  while read -r f hash name rest; do
    [ "$f" = deb ] || continue
    # A plain file name of debs/, nothing that leads elsewhere.
    [[ $hash =~ ^[0-9a-f]{64}$ && $name =~ ^[A-Za-z0-9][A-Za-z0-9.+~_-]*\.deb$ && -z $rest ]] \
      || die "$manifest: not a line \"deb SHA256 FILE.deb\": $f $hash $name${rest:+ $rest}"
    expected[$name]=$hash
    names+=("$name")
  done < "$manifest"
  [ ${#names[@]} -gt 0 ] || die "$manifest names no package with its SHA-256: a bundle of an older scripts/gpu_bundle.sh (make it again)"
  for f in "$debs"/*.deb; do
    [ -n "${expected[${f##*/}]+set}" ] || die "$f is not in $manifest: refused, nothing unpacked (remove it, or make the bundle again)"
  done
  # Absolute: the paths end up in CMake's cache and LD_LIBRARY_PATH.
  mkdir -p "$build_dir"
  build_dir=$(cd "$build_dir" && pwd)
  prefix=$build_dir/deps
  rm -rf "$prefix.tmp" "$prefix.debs"
  mkdir "$prefix.tmp"
  mkdir -m 700 "$prefix.debs"
  # The copy is what is checked and unpacked: the bundle's file may change after the check.
  for name in "${names[@]}"; do
    [ -f "$debs/$name" ] || die "$debs/$name missing: $manifest names it (make the bundle again)"
    cp -- "$debs/$name" "$prefix.debs/$name"
    got=$(sha256sum < "$prefix.debs/$name")
    got=${got%% *}
    [ "$got" = "${expected[$name]}" ] \
      || die "$debs/$name has SHA-256 $got, $manifest gives ${expected[$name]}: a changed or damaged package, not unpacked (make the bundle again)"
    dpkg -x "$prefix.debs/$name" "$prefix.tmp" || die "dpkg -x $debs/$name failed: a damaged package (make the bundle again)"
  done
  rm -rf "$prefix" "$prefix.debs"
  mv "$prefix.tmp" "$prefix"
  echo "gpu_check: unpacked ${#names[@]} packages of $debs into $prefix, each with the SHA-256 $manifest gives"
}

# build_from_bundle: BUILD/deps from the bundle's packages, mpibert configured against this
# machine's PyTorch (python3's) and its CUDA toolkit, the targets built; sets bin and
# LD_LIBRARY_PATH for them.
build_from_bundle() {
  local f libdir torch_cmake nccl_h nccl=AUTO var value
  unpack_debs
  for f in usr/include/spdlog/spdlog.h usr/include/CLI/CLI.hpp usr/include/nlohmann/json.hpp usr/include/utf8proc.h; do
    [ -e "$prefix/$f" ] || die "$prefix/$f missing: $debs lacks its package (scripts/gpu_bundle.sh fetches them)"
  done
  libdir=$(find "$prefix/usr/lib" -name 'libspdlog.so.*' -printf '%h\n' -quit 2>/dev/null)
  if [ -z "$libdir" ] || [ ! -e "$libdir/libutf8proc.so" ]; then
    die "$debs lacks libspdlog or libutf8proc's shared library (libspdlog1.10, libutf8proc-dev, libutf8proc2)"
  fi

  # LibTorch, cmake and ninja are python3's (the GPU image has cmake and ninja in its venv's bin/).
  command -v python3 > /dev/null || die "python3 not found: the build takes LibTorch from python3's PyTorch"
  torch_cmake=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2> "$build_dir/python3-torch.log") \
    || { cat "$build_dir/python3-torch.log" >&2; die "$(command -v python3) cannot import torch (above): the build takes LibTorch from python3's PyTorch"; }
  [ -f "$torch_cmake/Torch/TorchConfig.cmake" ] || die "$torch_cmake/Torch/TorchConfig.cmake missing: python3's torch has no LibTorch CMake config"
  PATH=$PATH:$(python3 -c 'import os, sys; print(os.path.join(sys.prefix, "bin"))')
  command -v cmake > /dev/null || die "cmake not found, on PATH or beside python3"
  local generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  # NCCL: the wheel's beside torch (the one LibTorch loads) first, as CMakeLists.txt looks for it.
  nccl_h=$(python3 -c 'import importlib.util, os
site = os.path.dirname(importlib.util.find_spec("torch").submodule_search_locations[0])
print(next((p for p in (site + "/nvidia/nccl/include/nccl.h", "/usr/include/nccl.h", "/usr/local/cuda/include/nccl.h") if os.path.exists(p)), ""))')
  if [ -n "$nccl_h" ]; then nccl=ON; else echo "gpu_check: no nccl.h found: the NCCL backend is left out"; fi
  local launcher=()
  if command -v ccache > /dev/null; then  # as scripts/build.sh
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="cmake;-E;env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache")
  fi
  echo "== building from source in $build_dir: LibTorch of $(command -v python3), packages of $debs in $prefix${nccl_h:+, NCCL from $nccl_h}"
  rm -f "$build_dir/CMakeCache.txt"  # this machine's paths, found afresh; the objects stay
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
    -DCMAKE_PREFIX_PATH="$torch_cmake;$prefix/usr" -DMPIBERT_PYTHON="$(command -v python3)" \
    -DMPIBERT_WITH_NCCL=$nccl "${cmake_options[@]}" > "$build_dir/configure.log" 2>&1 \
    || { tail -40 "$build_dir/configure.log" >&2; die "configuring failed (above; all of it in $build_dir/configure.log)"; }
  grep "mpibert:" "$build_dir/configure.log" || true
  # Each package from the bundle, not from elsewhere on this machine.
  for var in spdlog_DIR nlohmann_json_DIR CLI11_DIR UTF8PROC_INCLUDE_DIR UTF8PROC_LIBRARY; do
    value=$(sed -n "s/^$var:[A-Z]*=//p" "$build_dir/CMakeCache.txt")
    case $value in
      "$prefix"/*) ;;
      *) die "CMake took $var=$value, not the bundle's (under $prefix)" ;;
    esac
  done
  echo "== building ${targets[*]} (log: $build_dir/build.log)"
  cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}" > "$build_dir/build.log" 2>&1 \
    || { tail -40 "$build_dir/build.log" >&2; die "the build failed (above; all of it in $build_dir/build.log)"; }
  bin=$build_dir/bin
  export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for f in "${targets[@]}"; do
    [ -x "$bin/$f" ] || continue
    value=$(ldd "$bin/$f" | awk '/not found/ { print $1 }' | tr '\n' ' ')
    [ -z "$value" ] || die "$bin/$f: libraries not found: $value"
  done
  echo "gpu_check: built ${targets[*]} in $bin; LD_LIBRARY_PATH=$libdir for the bundle's libraries"
}

py=/usr/bin/python3
[ -x "$py" ] || py=python3
bin=${MPIBERT_BIN_DIR:-build/bin}
# BUNDLE's lines but its marker and packages (named by unpack_debs).
describe_bundle() { echo "== bundle: $(grep -v -e '^deb ' -e '^mpibert GPU bundle' "$bundle/BUNDLE" | tr '\n' ' ')"; }
if [ "$build" = unpack ]; then
  unpack_debs
  exit 0
elif [ -n "$bundle" ] && [ "$build" != none ]; then
  [ ! -f "$bundle/BUNDLE" ] || describe_bundle
  build_from_bundle
  [ "$build" = run ] || exit 0
  py=python3  # the PyTorch built against, which the GPU image's python3 is
elif [ -n "$bundle" ]; then
  # The machine's own PyTorch holds the LibTorch (and its CUDA and NCCL libraries) to run against.
  py=python3
  bin=$bundle/bin
  torch_libs=$("$py" -c 'import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join([os.path.join(os.path.dirname(torch.__file__), "lib")] + sorted(glob.glob(site + "/nvidia/*/lib"))))')
  refuse_writable "$bundle" "$bundle/bin" "$bundle/lib"
  export LD_LIBRARY_PATH=$bundle/lib:$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  describe_bundle
fi
[ -x "$bin/mpibert" ] || { echo "gpu_check: $bin/mpibert not found: run bash scripts/build.sh first" >&2; exit 1; }

echo "== mpibert env"
env_json=$("$bin/mpibert" env)
echo "$env_json"
gpus=$("$py" -c 'import json, sys; d = json.loads(sys.argv[1])["devices"]; print(d.get("count", 0) if d["type"] == "cuda" else 0)' "$env_json")
if [ "$device" = cuda ] && [ "$gpus" -eq 0 ]; then
  if [ -e /proc/driver/nvidia ]; then
    echo "gpu_check: FAIL: an NVIDIA driver is loaded ($(head -1 /proc/driver/nvidia/version 2>/dev/null)) but mpibert sees" \
         "no GPU: a driver older than CUDA 13's, CUDA_VISIBLE_DEVICES, or a container without its GPUs" >&2
    exit 1
  fi
  echo "gpu_check: no NVIDIA driver and no GPU here; nothing to check (--device cpu runs the checks on the CPU)"
  exit 0
fi

work=${GPU_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}
mkdir -p "$work"
table=$work/table.tsv
: > "$table"
failed=0
# record CHECK AGAINST MEASURED LIMIT OK: one row of the table.
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$([ "$5" = 1 ] && echo pass || echo FAIL)" >> "$table"
  [ "$5" = 1 ] || failed=1
}
# logged NAME COMMAND...: runs it with its output in $work/NAME.log; on failure shows the log's end.
logged() {
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then return 0; fi
  echo "gpu_check: $name failed:"; tail -20 "$work/$name.log"; return 1
}

vocab=data_prep/data/bert-base-uncased/vocab.txt
squad=data_prep/data/squad/dev-v1.1.json.gz

# Steps 2 and 3 (the block is not indented: its Python here-documents must start at column 0).
if [ "$checks" = 1 ]; then
if [ "$device" = cuda ]; then
  echo "== GPU tests"
  if mpiexec -n 1 --bind-to none "$bin/test_gpu" --gtest_filter=-GpuStepGraphs.*; then
    record "GPU tests (test_gpu)" "HF fixture, CPU" "all" "-" 1
  else record "GPU tests (test_gpu)" "HF fixture, CPU" "failures above" "-" 0; fi
  # The step the GPU replays (--cuda-graphs) against the eager step: 30 packed steps, fp32.
  if mpiexec -n 1 --bind-to none "$bin/test_gpu" --gtest_filter=GpuStepGraphs.* | tee "$work/graphs-test.log"; then
    record "CUDA graphs: replayed steps" "eager steps (loss 1e-4, weights)" "$(sed -n 's/^ *step graphs: //p' "$work/graphs-test.log")" "-" 1
  else record "CUDA graphs: replayed steps" "eager steps (loss 1e-4, weights)" "failures above" "-" 0; fi
fi

echo "== short runs of the fixture model on $device (logs in $work)"
fixture=${MPIBERT_FIXTURES:-tests/fixtures}/model/config.json
"$py" - "$fixture" "$work" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
for name, dropout in (("config.json", 0.0), ("config-dropout.json", 0.1)):
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = dropout
    json.dump(config, open("%s/%s" % (sys.argv[2], name), "w"))
PY
prep=(--vocab "$vocab" --max-seq-length 128 --doc-stride 64 --log-level warn)
logged split "$bin/mpibert-prep" split "$squad" --articles 0:3 --out "$work/train.json"
logged split "$bin/mpibert-prep" split "$squad" --articles 3:4 --out "$work/eval.json"
logged prep "$bin/mpibert-prep" --input "$work/train.json" --out "$work/shards/train" --split train "${prep[@]}"
logged prep "$bin/mpibert-prep" --input "$work/eval.json" --out "$work/shards/eval" --split eval "${prep[@]}"
unbounded=(--vocab "$vocab" --train-shards "$work/shards/train" --threads 1 --padding full --learning-rate 1e-3 --seed 7
           --logging-steps 1 --save-total-limit 1 --log-level warn)
common=("${unbounded[@]}" --max-steps 6)
# Global batch 24 (divides among 1, 2 and 3 ranks), two micro-batches per step.
per_rank() { echo --batch-size $((12 / $1)) --gradient-accumulation 2; }
# ranks N: mpiexec's launch of N ranks (none for 1).
ranks() { [ "$1" -eq 1 ] || echo mpiexec -n "$1" --oversubscribe --bind-to none; }
run_ok() { [ -f "$work/$1/checkpoint-6/model.safetensors" ]; }
# compare NAME A B LIMIT AGAINST: the weights of two runs' last checkpoints, within LIMIT.
compare() {
  local name=$1 a=$2 b=$3 limit=$4 against=$5 metric=${6:-max} out
  if ! run_ok "$a" || ! run_ok "$b"; then record "$name" "$against" "run failed (logs)" "$limit" 0; return; fi
  out=$("$py" scripts/compare_weights.py "$work/$a/checkpoint-6" "$work/$b/checkpoint-6" $([ "$metric" = rms ] && echo --rms)) ||
    { record "$name" "$against" "$out" "$limit" 0; return; }
  local difference=${out%% *}
  record "$name" "$against" "$metric abs weight diff $difference" "$limit" \
    "$("$py" -c 'import sys; print(int(float(sys.argv[1]) <= float(sys.argv[2])))' "$difference" "$limit")"
}
# launch NAME RANKS COMM [OPTION...]: a fixture run of RANKS ranks into $work/NAME, its output in
# $work/NAME.log; its exit status. Ranks sharing a GPU reach NCCL through its test mode.
launch() {
  local name=$1 n=$2 comm=$3 shared=0; shift 3
  [ "$comm" = nccl ] && [ "$n" -gt "$gpus" ] && shared=1
  MPIBERT_NCCL_SHARED_GPU=$shared $(ranks "$n") "$bin/mpibert" train --model-config "$work/config.json" "${unbounded[@]}" \
    $(per_rank "$n") --device "$device" --comm "$comm" --output-dir "$work/$name" "$@" > "$work/$name.log" 2>&1
}
# train NAME RANKS COMM [OPTION...]: launch, 6 steps; a failure shows the log's end (the
# comparison then records it).
train() {
  launch "$@" --max-steps 6 || { echo "gpu_check: $1 failed:"; tail -20 "$work/$1.log"; }
}

# Runs of an earlier check in GPU_CHECK_DIR are replaced, not continued.
rm -rf "$work"/{cpu-1,dev-*,straight*,resumed*,reshard,fp16-*,fail,killed,eval-*,profile}
logged cpu-1 "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" $(per_rank 1) --device cpu --output-dir "$work/cpu-1" || true
train dev-1 1 auto
compare "1 rank on $device" cpu-1 dev-1 "$([ "$device" = cuda ] && echo 1e-4 || echo 0)" "1 rank on the CPU"
multi=$([ "$device" = cuda ] && echo nccl || echo mpi)
for n in 2 3; do
  for strategy in ddp zero1 zero2 fsdp; do
    train "dev-$n-$strategy-$multi" "$n" "$multi" --strategy "$strategy"
    compare "$n ranks $strategy, $multi" dev-1 "dev-$n-$strategy-$multi" 1e-5 "1 rank on $device"
  done
done
if [ "$device" = cuda ]; then
  for strategy in ddp zero2; do
    train "dev-2-$strategy-mpi" 2 mpi --strategy "$strategy"
    compare "2 ranks $strategy, mpi" dev-1 "dev-2-$strategy-mpi" 1e-5 "1 rank on $device"
  done
fi
# Reduced-precision communication: gradients reduced in bf16 (fsdp: its parameters gathered in bf16
# too) on 2 ranks end near 1 rank's fp32 run. By the RMS over the weights (compare_weights.py
# --rms): rounding moves a few weights by AdamW steps of +-lr, which bound the largest difference
# whatever the gradients; the limits are 8x what the CPU gave on 2026-11-26 (2.4e-6, 1.2e-5), where
# wrong gradients give ~1e-3.
for strategy in ddp zero2 fsdp; do
  gathers=fp32 limit=2e-5
  [ "$strategy" = fsdp ] && gathers=bf16 limit=1e-4
  train "dev-2-$strategy-$multi-bf16" 2 "$multi" --strategy "$strategy" --reduce-dtype bf16 --param-dtype "$gathers"
  compare "2 ranks $strategy, $multi, gradients in bf16, gathers in $gathers" dev-1 "dev-2-$strategy-$multi-bf16" "$limit" \
    "1 rank on $device" rms
done
# Resharding: zero1's optimizer state saved by 2 ranks, loaded by 3.
train reshard 2 "$multi" --strategy zero1 --stop-after-steps 3
train reshard 3 "$multi" --strategy zero1 --resume auto
compare "zero1 stopped on 2 ranks, resumed on 3" dev-1 reshard 1e-5 "1 rank on $device"

# Resume: dropout on, so that the RNG state (CPU and CUDA) must come back with the checkpoint.
# With --deterministic bit for bit; without it, the difference that the GPU's atomics leave.
dropout=(--model-config "$work/config-dropout.json" "${common[@]}" $(per_rank 1) --device "$device")
for mode in deterministic default; do
  flags=()
  [ $mode = deterministic ] && flags=(--deterministic)
  logged "straight-$mode" "$bin/mpibert" train "${dropout[@]}" "${flags[@]}" --output-dir "$work/straight-$mode" || true
  logged "stopped-$mode" "$bin/mpibert" train "${dropout[@]}" "${flags[@]}" --stop-after-steps 3 --output-dir "$work/resumed-$mode" || true
  logged "resumed-$mode" "$bin/mpibert" train "${dropout[@]}" "${flags[@]}" --resume auto --output-dir "$work/resumed-$mode" || true
done
compare "checkpoint at step 3, resumed (--deterministic)" straight-deterministic resumed-deterministic 0 "the run never stopped"
compare "checkpoint at step 3, resumed" straight-default resumed-default "$([ "$device" = cuda ] && echo 1e-5 || echo 0)" \
  "the run never stopped"

# fp16 with loss scaling: a non-finite gradient on one rank at step 2 (MPIBERT_INJECT_OVERFLOW)
# makes every rank skip that step; 2 ranks end where 1 rank with the same skip does.
MPIBERT_INJECT_OVERFLOW=0:1 train fp16-1 1 auto --fp16
MPIBERT_INJECT_OVERFLOW=1:1 train "fp16-2-$multi" 2 "$multi" --strategy zero1 --fp16
compare "fp16, 2 ranks zero1, $multi, step 2 skipped" fp16-1 "fp16-2-$multi" 2e-3 "1 rank fp16 on $device"
skipped=$("$py" -c 'import json, sys; print(" ".join(str(json.load(open(f)).get("skipped_steps")) for f in sys.argv[1:]))' \
  "$work/fp16-1/results.json" "$work/fp16-2-$multi/results.json" 2>/dev/null || echo "no results")
record "fp16: steps skipped, 1 rank and 2" "one each" "$skipped" "1 1" "$([ "$skipped" = "1 1" ] && echo 1 || echo 0)"

# A rank that fails after its backward (its gradients' collectives in flight), and one killed with
# SIGKILL: the job must end promptly, not wait in a collective.
ended_within() {  # NAME START RC LOG PATTERN: a row for a job that had to fail
  local seconds found=0
  seconds=$("$py" -c 'import sys, time; print("%.1f" % (time.time() - float(sys.argv[1])))' "$2")
  grep -q "$5" "$4" && found=1
  record "$1" "the job ends with its message" "exit $3 after $seconds s, message $([ $found = 1 ] && echo found || echo missing)" \
    "non-zero, 60 s" "$([ "$3" -ne 0 ] && [ $found = 1 ] && "$py" -c 'import sys; sys.exit(float(sys.argv[1]) > 60)' "$seconds" && echo 1 || echo 0)"
}
start=$(date +%s.%N)
rc=0
MPIBERT_INJECT_FAILURE=1:3:backward launch fail 2 "$multi" --strategy ddp --max-steps 6 || rc=$?
ended_within "rank 1 fails after backward, ddp, $multi" "$start" "$rc" "$work/fail.log" "MPIBERT_INJECT_FAILURE"
rc=0
launch killed 2 "$multi" --strategy zero2 --max-steps 100000 &
job=$!
for _ in $(seq 600); do  # until step 2 is logged (at most 60 s)
  grep -q '"step":2,' "$work/killed/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
start=$(date +%s.%N)
pkill -KILL -n -f -- "--output-dir $work/killed" || true
wait $job || rc=$?
ended_within "a rank killed (SIGKILL) mid-run, zero2, $multi" "$start" "$rc" "$work/killed.log" "exited on signal 9\|killed\|Killed"

# Evaluation of one checkpoint on the device and on the CPU.
if run_ok dev-1; then
  for where in "$device" cpu; do
    logged "eval-$where" "$bin/mpibert" eval --model "$work/dev-1/checkpoint-6" --data "$work/shards/eval" --device "$where" \
      --output-dir "$work/eval-$where" || true
  done
  verdict=$("$py" - "$work/eval-$device" "$work/eval-cpu" <<'PY'
import json, sys
try:
    a, b = (json.load(open(d + "/eval_results.json")) for d in sys.argv[1:])
    p, q = (json.load(open(d + "/predictions.json")) for d in sys.argv[1:])
except (OSError, ValueError) as e:
    print("0\tno results (%s)" % e); sys.exit()
differ = sum(1 for k in p if p[k] != q.get(k))
ok = abs(a["eval_f1"] - b["eval_f1"]) <= 0.1 and differ <= max(1, len(p) // 200)
print("%d\tF1 %.3f vs %.3f, %d of %d answers differ" % (ok, a["eval_f1"], b["eval_f1"], differ, len(p)))
PY
)
  record "evaluation on $device" "the CPU's, same checkpoint" "${verdict#*$'\t'}" "F1 0.1, 0.5% answers" "${verdict%%$'\t'*}"
else
  record "evaluation on $device" "the CPU's, same checkpoint" "no checkpoint (dev-1 failed)" "-" 0
fi

# A profile of steps 2-3: our phases, and on a GPU its kernels.
logged profile "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" $(per_rank 1) --device "$device" \
  --profile --profile-wait 1 --profile-warmup 1 --profile-active 2 --output-dir "$work/profile" || true
verdict=$("$py" - "$work/profile/profile/trace.json" "$device" <<'PY'
import json, sys
try:
    events = json.load(open(sys.argv[1]))["traceEvents"]
except (OSError, ValueError, KeyError) as e:
    print("0\tno trace (%s)" % e); sys.exit()
names = {e.get("name") for e in events}
phases = [p for p in ("mpibert::forward", "mpibert::backward", "mpibert::optimizer") if p in names]
kernels = sum(1 for e in events if e.get("cat") == "kernel")
ok = len(phases) == 3 and (kernels > 0 or sys.argv[2] != "cuda")
print("%d\t%d events, phases %s, %d GPU kernels" % (ok, len(events), "/".join(p.split("::")[1] for p in phases), kernels))
PY
)
record "profile (Chrome trace)" "our phases$([ "$device" = cuda ] && echo ', GPU kernels')" "${verdict#*$'\t'}" "-" "${verdict%%$'\t'*}"

echo
echo "| check | against | measured | limit | result |"
echo "|---|---|---|---|---|"
while IFS=$'\t' read -r check against measured limit result; do
  echo "| $check | $against | $measured | $limit | $result |"
done < "$table"
echo
fi  # steps 2 and 3

speeds=$work/throughput.md
: > "$speeds"
if [ "$device" = cuda ] && [ "$throughput" = 1 ]; then
  echo "== bert-base training steps on the GPU (bf16, batch ${BATCH:-32}, ${STEPS:-100} steps)"
  if [ ! -f "$work/bert-shards/manifest.json" ]; then
    mpirun -n 4 --bind-to none "$bin/mpibert-prep" --input "$squad" --vocab "$vocab" --out "$work/bert-shards" --split train \
      --log-level warn > "$work/bert-prep.log" 2>&1 || { tail -20 "$work/bert-prep.log"; failed=1; }
  fi
  echo "| run | samples/s, whole run | samples/s, steady | MFU | model GFLOP/sample (real tokens) | peak GPU memory |" > "$speeds"
  echo "|---|---|---|---|---|---|" >> "$speeds"
  # bert-base with each padding and packed with --cuda-graphs, then distilbert-base packed beside
  # it (the same shards).
  for run in bert:full bert:dynamic bert:packed bert:packed-graphs distilbert:packed; do
    model=${run%%:*} mode=${run#*:}
    padding=${mode%-graphs} graphs=()
    [ "$mode" = packed-graphs ] && graphs=(--cuda-graphs)
    name=$model-$mode
    label="mpibert, $mode"
    [ "$model" = bert ] || label="mpibert $model-base, $mode"
    rm -rf "$work/$name"
    logged "$name" "$bin/mpibert" train --model-config "bench/$model-base-config.json" --vocab "$vocab" \
      --train-shards "$work/bert-shards" --output-dir "$work/$name" --device cuda --bf16 --padding "$padding" "${graphs[@]}" \
      --batch-size "${BATCH:-32}" --max-steps "${STEPS:-100}" --learning-rate 4e-5 --logging-steps 20 --save-total-limit 1 || failed=1
    "$py" - "$work/$name" "$label" >> "$speeds" <<'PY' || echo "| $label | failed (log) | | | | |" >> "$speeds"
import json, sys
run, label = sys.argv[1:]
r = json.load(open(run + "/results.json"))
u = r["utilization"]
print("| %s | %.1f | %.1f (after step %d) | %.3f (steady %.3f) | %.1f | %.2f GiB |" % (
    label, r["train_step_samples_per_second"], r["train_steady_samples_per_second"], r["steady_after_steps"], u["mfu"],
    u["steady_mfu"], u["model_flops_per_sample"] / 1e9, r.get("peak_gpu_memory_bytes", 0) / 2**30))
PY
  done
  if [ "$peer" = 1 ]; then
    # HF's Trainer on the same GPU and features (run_qa's preprocessing, padded to 384), steady
    # over the steps after its first.
    if logged hf-peer "$py" bench/hf_peer/run_qa_peer.py throughput --train-file "$squad" --vocab "$vocab" \
        --config bench/bert-base-config.json --batch "${BATCH:-32}" --steps "${STEPS:-100}" --padding full --bf16 --device cuda; then
      "$py" - "$work/hf-peer.log" >> "$speeds" <<'PY'
import json, sys
r = json.loads([line for line in open(sys.argv[1]) if line.startswith("{")][-1])
print("| HF Trainer, full | | %.1f (steps 2-%d) | | %.1f | |" % (r["samples_per_second"], r["steps"] + 1, r["model_flops_per_sample"] / 1e9))
PY
    else
      echo "| HF Trainer, full | failed (log) | | | | |" >> "$speeds"
    fi
  fi
  # Where the packed step's time goes, eager and graphed: 5 profiled steps after 20, from the trace.
  echo >> "$speeds"
  echo "| packed steps 21-25 | kernels/step | GPU busy/step (ms) | step (ms) | gaps (%) | top kernels by time |" >> "$speeds"
  echo "|---|---|---|---|---|---|" >> "$speeds"
  for mode in packed packed-graphs; do
    graphs=()
    [ "$mode" = packed-graphs ] && graphs=(--cuda-graphs)
    rm -rf "$work/profile-$mode"
    logged "profile-$mode" "$bin/mpibert" train --model-config bench/bert-base-config.json --vocab "$vocab" \
      --train-shards "$work/bert-shards" --output-dir "$work/profile-$mode" --device cuda --bf16 --padding packed "${graphs[@]}" \
      --batch-size "${BATCH:-32}" --max-steps 26 --learning-rate 4e-5 --logging-steps 0 --save-total-limit 1 \
      --profile --profile-wait 18 --profile-warmup 2 --profile-active 5 || failed=1
    PYTHONPATH=tools "$py" -m mpibert_tools.kernel_accounting "$work/profile-$mode/profile/trace.json" "$mode" 5 >> "$speeds" \
      || echo "| $mode | no trace (log) | | | | |" >> "$speeds"
  done
  cat "$speeds"
fi

if [ -n "$out" ]; then
  # At most 4 files: the two tables, the environment, and every log and results.json in a tarball.
  mkdir -p "$out"
  {
    echo "| check | against | measured | limit | result |"
    echo "|---|---|---|---|---|"
    while IFS=$'\t' read -r check against measured limit result; do echo "| $check | $against | $measured | $limit | $result |"; done < "$table"
  } > "$out/checks.md"
  [ -s "$speeds" ] && cp "$speeds" "$out/throughput.md"
  echo "$env_json" > "$out/env.json"
  (cd "$work" && find . \( -name '*.log' -o -name 'results.json' -o -name 'metrics.jsonl' -o -name 'eval_results.json' \
     -o -name 'trace.json' \) -print0 | tar --null -czf "$out/logs.tar.gz" -T -)
fi
echo "gpu_check: runs and logs in $work"
if [ $failed = 1 ]; then echo "gpu_check: FAILED (table above)"; exit 1; fi
echo "gpu_check: every check passed"
