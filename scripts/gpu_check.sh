#!/usr/bin/env bash
# The one command a machine with an NVIDIA GPU runs, after `bash scripts/build.sh` or with a
# bundle of binaries built elsewhere (scripts/gpu_bundle.sh, for a bare machine without network).
# It is made for a lent GPU's few minutes: every check is a row with its own time limit, run in
# the order below, each landing in --out as it finishes, so that whatever stops the call (its
# --deadline, a row that fails, the lender's limit) leaves every finished row behind:
#   1. what `mpibert env` sees; an NVIDIA driver (/proc/driver/nvidia) with no GPU visible to
#      mpibert is a failure (a driver older than CUDA 13's, CUDA_VISIBLE_DEVICES, a container
#      started without its GPUs), no driver at all is "nothing to check";
#   2. the rows never yet run on a GPU first (docs/gpus.md, "What has run on a GPU"):
#        the replayed step (--cuda-graphs) against the eager one (test_gpu GpuStepGraphs);
#        a capture that fails (its end too): the memory pool and the generator left as they were,
#        a fresh capture after it (test_gpu GpuFailedCapture, in a process of its own);
#        bert-base throughput packed, eager and graphed, and HF's Trainer in the same call;
#        the packed step's kernels, eager and graphed (kernel_accounting.py over a profile);
#        fp16 on 2 ranks with a step skipped on every rank;
#        hsdp over NCCL, 2 ranks sharing the GPU, in shard groups of 1 (the split communicators);
#        DistilBERT packed (distilbert-base throughput);
#        every encoder family packed against the CPU (test_gpu GpuFamilies: RoBERTa, XLM-R and
#        ELECTRA through the varlen kernels, DeBERTa feature by feature, ModernBERT's window);
#        the families' speed beside HF's own models (bench/families.sh: families.md);
#   3. then the rows that passed before: the rest of test_gpu; the fixture's tiny BERT (6 steps of
#      global batch 24, gradient accumulation 2) on 1 rank against the CPU, 2 and 3 ranks x {ddp,
#      zero1, zero2, fsdp} over NCCL (ranks sharing the GPU: MPIBERT_NCCL_SHARED_GPU), ddp and zero2
#      over MPI, gradients reduced in bf16, zero1 resharded from 2 ranks to 3, a resume with and
#      without --deterministic, a failing and a killed rank ending the job, evaluation against the
#      CPU's, a profile; bert-base full and dynamic.
# NCCL rows run with --collective-timeout 60. Exits 1 when a finished row failed; at the deadline
# (or on SIGTERM) it writes what it has, names the rows it did not get to, and exits 0 (1 where a
# finished row failed). `--device cpu` runs the checks on the CPU in the GPU's place (ctest
# gpu_check.cpu). `--out DIR` (default: the work folder's out/) gets checks.md (the table so far),
# throughput.md, kernels.md, families.md, env.json, unfinished.md (the rows not run) and, at the end,
# logs.tar.gz.
# `--skip-checks` leaves out the correctness rows, `--skip-throughput` the speed rows,
# `--skip-peer` HF's Trainer. `--fake` replaces every row's command with a short stand-in (no GPU,
# no binaries: ctest gpu_check.plumbing); GPU_CHECK_FAKE_HANG and GPU_CHECK_FAKE_FAIL name rows
# (by id, comma-separated) whose stand-in hangs or fails, GPU_CHECK_FAKE_SECONDS is each one's time,
# GPU_CHECK_FAKE_LIMIT caps each row's limit.
#
# On the lent machine (docs/gpus.md, "The one call"): the bundle must travel with the checkout,
# and an ignored folder travels only when the call names it in `carry`:
#   here:  bash scripts/build.sh && bash scripts/gpu_bundle.sh gpu-bundle
#   there: run(command="bash scripts/gpu_check.sh --bundle gpu-bundle --deadline 420 --out $OUT/gpu-check",
#              carry=["gpu-bundle"], timeout_s=480)
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
#                         mpibert-prep, test_gpu and bench_train built, nothing downloaded; LD_LIBRARY_PATH
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
#                        [--target T]... [-DVAR=VALUE]...] [--out DIR] [--deadline SECONDS] [--skip-checks]
#                        [--skip-throughput] [--skip-peer] [--fake]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
device=cuda
throughput=1
peer=1
checks=1
bundle=
out=
deadline=0
fake=0
build=none  # none, run (build, then the checks), only or unpack
build_dir="build-gpu"
targets=()
cmake_options=()
usage="usage: scripts/gpu_check.sh [--device cuda|cpu] [--bundle DIR [--build | --build-only | --unpack-only] [--build-dir BUILD] [--target T]... [-DVAR=VALUE]...] [--out DIR] [--deadline SECONDS] [--skip-checks] [--skip-throughput] [--skip-peer] [--fake]"
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
    --deadline) deadline=$2; shift 2 ;;
    --fake) fake=1; shift ;;
    --skip-throughput) throughput=0; shift ;;
    --skip-peer) peer=0; shift ;;
    --skip-checks) checks=0; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
die() { echo "gpu_check: $*" >&2; exit 1; }
[ "$device" = cuda ] || [ "$device" = cpu ] || { echo "gpu_check: --device cuda or cpu" >&2; exit 2; }
[[ $deadline =~ ^[0-9]+$ ]] || { echo "gpu_check: --deadline takes whole seconds (0: none)" >&2; exit 2; }
if [ -n "$bundle" ]; then
  [ -d "$bundle" ] || die "bundle $bundle not found: make it here with scripts/gpu_bundle.sh $bundle, and name it in the device call's carry (an ignored folder travels only so): run(command=\"bash scripts/gpu_check.sh --bundle $bundle --deadline 420 --out \$OUT/gpu-check\", carry=[\"$bundle\"]); paths are relative to the repository root"
  # Without binaries the bundle is for a build here.
  [ "$build" != none ] || [ -e "$bundle/bin/mpibert" ] || build=run
elif [ "$build" != none ]; then
  echo "gpu_check: --build, --build-only and --unpack-only take their packages from --bundle DIR" >&2; exit 2
fi
if [ ${#targets[@]} -gt 0 ] || [ ${#cmake_options[@]} -gt 0 ]; then
  # The checks need all three programs, built as the project builds them.
  [ "$build" = only ] || { echo "gpu_check: --target and -D options go with --build-only" >&2; exit 2; }
fi
[ ${#targets[@]} -gt 0 ] || targets=(mpibert mpibert-prep test_gpu bench_train)

# refuse_writable DIR: dies when anyone but this user (or root) could change DIR or anything in it:
# a file or folder writable by its group or by every user, or owned by another user (the bundle's
# programs run, its libraries go first on LD_LIBRARY_PATH, its packages into the build).
refuse_writable() {
  local found
  found=$(find "$1" \( -perm /g+w,o+w -o ! \( -user "$(id -u)" -o -user 0 \) \) ! -type l -print -quit 2> /dev/null)
  [ -z "$found" ] || die "$found is writable by others than its owner, or not this user's ($(stat -c '%A %U' "$found")): \
anyone could put code into this run; chmod -R go-w $1 (scripts/gpu_bundle.sh leaves a bundle writable by its owner alone)"
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
  refuse_writable "$bundle"
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
  # Before anything of it runs: nobody else may have changed it.
  refuse_writable "$bundle"
  # The machine's own PyTorch holds the LibTorch (and its CUDA and NCCL libraries) to run against.
  py=python3
  bin=$bundle/bin
  torch_libs=$("$py" -c 'import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join([os.path.join(os.path.dirname(torch.__file__), "lib")] + sorted(glob.glob(site + "/nvidia/*/lib"))))')
  export LD_LIBRARY_PATH=$bundle/lib:$torch_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  describe_bundle
fi

# --- the GPU ------------------------------------------------------------------------------------
if [ "$fake" = 1 ]; then
  env_json='{"fake": "gpu_check --fake: every row a stand-in"}' gpus=1
else
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
fi

# --- the rows: each lands in --out as it finishes --------------------------------------------------
work=${GPU_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}
mkdir -p "$work"
out=${out:-$work/out}
mkdir -p "$out"
table=$work/table.tsv
speeds=$out/throughput.md
: > "$table"
rm -f "$speeds" "$out/kernels.md" "$out/families.md" "$out/unfinished.md" "$out/logs.tar.gz"
echo "$env_json" > "$out/env.json"
started=$(date +%s)
unfinished=()

# record CHECK AGAINST MEASURED LIMIT OK: one row of the table, and the table in --out rewritten.
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$([ "$5" = 1 ] && echo pass || echo FAIL)" >> "$table"
  write_checks
}
write_checks() {
  {
    echo "| check | against | measured | limit | result |"
    echo "|---|---|---|---|---|"
    while IFS=$'\t' read -r check against measured limit result; do echo "| $check | $against | $measured | $limit | $result |"; done < "$table"
  } > "$out/checks.md.tmp" && mv "$out/checks.md.tmp" "$out/checks.md"
}
write_checks
# speed_row LINE: a line of throughput.md (its header first when it is new).
speed_row() {
  [ -s "$speeds" ] || printf '%s\n%s\n' "| run | samples/s, whole run | samples/s, steady (replayed steps with graphs) | MFU | model GFLOP/sample (real tokens) | peak GPU memory | steps: eager, captured, replayed |" \
    "|---|---|---|---|---|---|---|" > "$speeds"
  echo "$1" >> "$speeds"
}
# logged NAME COMMAND...: runs it with its output in $work/NAME.log; on failure shows the log's end.
logged() {
  local name=$1; shift
  if "$@" > "$work/$name.log" 2>&1; then return 0; fi
  echo "gpu_check: $name failed:"; tail -20 "$work/$name.log"; return 1
}
# The tables so far, the rows not run, and every log: what a stopped call leaves.
finish() {  # [WHY the rest was not run]
  write_checks
  if [ ${#unfinished[@]} -gt 0 ]; then
    { echo "Rows not run (${1:-the deadline of $deadline s came first}):"; printf -- '- %s\n' "${unfinished[@]}"; } > "$out/unfinished.md"
    cat "$out/unfinished.md"
  fi
  (cd "$work" && find . -path ./out -prune -o \( -name '*.log' -o -name 'results.json' -o -name 'metrics.jsonl' \
     -o -name 'eval_results.json' -o -name 'trace.json' \) -print0 | tar --null -czf "$out/logs.tar.gz" -T - 2> /dev/null) || true
}
row_pid= row_id=
stopped() {
  [ -z "$row_pid" ] || kill -KILL -- "-$row_pid" 2> /dev/null || true
  unfinished+=("${row_id:-?} (running when the signal came) and every row after it")
  finish "stopped by a signal"
  echo "gpu_check: stopped by a signal; the rows so far are in $out"
  exit 0
}
trap stopped TERM INT

seconds_left() { if [ "$deadline" -gt 0 ]; then echo $(( deadline - ($(date +%s) - started) )); else echo 1000000; fi; }
# limited SECONDS COMMAND...: COMMAND (a function too) in a subshell of its own process group,
# ended (TERM, then KILL) after SECONDS; its exit status, 124 when ended.
limited() {
  local limit=$1 pid ticks=0
  shift
  set -m
  ( set +e; "$@" ) &
  pid=$!
  set +m
  row_pid=$pid
  while kill -0 "$pid" 2> /dev/null; do
    if [ $ticks -ge $(( limit * 10 )) ]; then
      kill -TERM -- "-$pid" 2> /dev/null
      sleep 2
      kill -KILL -- "-$pid" 2> /dev/null
      wait "$pid" 2> /dev/null
      return 124
    fi
    sleep 0.1
    ticks=$(( ticks + 1 ))
  done
  row_pid=
  wait "$pid"
}
# row ID LIMIT COMMAND...: one row (COMMAND records it), ended at LIMIT seconds or at what the
# deadline leaves; a row that hangs or fails without recording itself is recorded so. Past the
# deadline the row is named as not run.
row() {
  local id=$1 limit=$2 left before rc=0
  shift 2
  left=$(seconds_left)
  if [ "$left" -lt 5 ]; then unfinished+=("$id"); return 0; fi
  [ "$limit" -le "$left" ] || limit=$left
  if [ "$fake" = 1 ]; then
    set -- fake_row "$id"
    [ "$limit" -le "${GPU_CHECK_FAKE_LIMIT:-$limit}" ] || limit=$GPU_CHECK_FAKE_LIMIT
  fi
  echo "== $id (at most $limit s)"
  row_id=$id
  before=$(wc -l < "$table")
  limited "$limit" "$@" || rc=$?
  if [ $rc -eq 124 ]; then
    record "$id" "-" "ended at its limit of $limit s (logs in $work)" "$limit s" 0
  elif [ "$(wc -l < "$table")" -eq "$before" ]; then
    record "$id" "-" "$([ $rc -eq 0 ] && echo 'recorded nothing' || echo "failed, exit $rc") (logs in $work)" "-" 0
  fi
}
# fake_row ID: what --fake runs in a row's place.
fake_row() {
  case ",${GPU_CHECK_FAKE_HANG:-}," in *",$1,"*) sleep 100000 ;; esac
  sleep "${GPU_CHECK_FAKE_SECONDS:-0.2}"
  case ",${GPU_CHECK_FAKE_FAIL:-}," in *",$1,"*) record "$1" "a stand-in" "failed, as asked" "-" 0; return 0 ;; esac
  record "$1" "a stand-in" "ran" "-" 1
}

vocab=data_prep/data/bert-base-uncased/vocab.txt
squad=data_prep/data/squad/dev-v1.1.json.gz
fixture=${MPIBERT_FIXTURES:-tests/fixtures}
# test_gpu reads its fixtures and data from here, wherever this checkout lies on the machine.
export MPIBERT_FIXTURES=$(cd "$fixture" && pwd) MPIBERT_DATA_DIR=$(pwd)/data_prep/data
multi=$([ "$device" = cuda ] && echo nccl || echo mpi)

# --- the fixture model's runs (the correctness rows) ----------------------------------------------
prepare_fixture() {
  # Runs of an earlier check in GPU_CHECK_DIR are replaced, not continued.
  rm -rf "$work"/{cpu-1,dev-*,straight*,resumed*,reshard,fp16-*,fail,killed,eval-*,profile}
  "$py" - "$fixture/model/config.json" "$work" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
for name, dropout in (("config.json", 0.0), ("config-dropout.json", 0.1)):
    config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = dropout
    json.dump(config, open("%s/%s" % (sys.argv[2], name), "w"))
PY
  local prep=(--vocab "$vocab" --max-seq-length 128 --doc-stride 64 --log-level warn)
  logged split "$bin/mpibert-prep" split "$squad" --articles 0:3 --out "$work/train.json" &&
    logged split "$bin/mpibert-prep" split "$squad" --articles 3:4 --out "$work/eval.json" &&
    logged prep "$bin/mpibert-prep" --input "$work/train.json" --out "$work/shards/train" --split train "${prep[@]}" &&
    logged prep "$bin/mpibert-prep" --input "$work/eval.json" --out "$work/shards/eval" --split eval "${prep[@]}"
  local ok=$?
  record "fixture shards (3 articles train, 1 eval)" "-" "$([ $ok = 0 ] && echo prepared || echo 'failed (prep.log)')" "-" \
    "$([ $ok = 0 ] && echo 1 || echo 0)"
}
unbounded=(--vocab "$vocab" --train-shards "$work/shards/train" --threads 1 --padding full --learning-rate 1e-3 --seed 7
           --logging-steps 1 --save-total-limit 1 --log-level warn)
common=("${unbounded[@]}" --max-steps 6)
# Global batch 24 (divides among 1, 2 and 3 ranks), two micro-batches per step.
per_rank() { echo --batch-size $((12 / $1)) --gradient-accumulation 2; }
# ranks N: mpiexec's launch of N ranks (none for 1).
ranks() { [ "$1" -eq 1 ] || echo mpiexec -n "$1" --oversubscribe --bind-to none; }
run_ok() { [ -f "$work/$1/checkpoint-6/model.safetensors" ]; }
# compare NAME A B LIMIT AGAINST [max|rms]: the weights of two runs' last checkpoints, within LIMIT.
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
# $work/NAME.log; its exit status. Ranks sharing a GPU reach NCCL through its test mode; NCCL's
# collectives give up after 60 s rather than the default 300.
launch() {
  local name=$1 n=$2 comm=$3 shared=0 limits=()
  shift 3
  [ "$comm" = nccl ] && [ "$n" -gt "$gpus" ] && shared=1
  [ "$comm" = nccl ] && limits=(--collective-timeout 60)
  MPIBERT_NCCL_SHARED_GPU=$shared $(ranks "$n") "$bin/mpibert" train --model-config "$work/config.json" "${unbounded[@]}" \
    $(per_rank "$n") --device "$device" --comm "$comm" "${limits[@]}" --output-dir "$work/$name" "$@" > "$work/$name.log" 2>&1
}
# train NAME RANKS COMM [OPTION...]: launch, 6 steps; a failure shows the log's end (the
# comparison then records it).
train() {
  launch "$@" --max-steps 6 || { echo "gpu_check: $1 failed:"; tail -20 "$work/$1.log"; }
}
reference_run() {  # 1 rank on the device: what the multi-rank rows end near
  train dev-1 1 auto
  record "1 rank on $device, 6 steps" "-" "$(run_ok dev-1 && echo 'ran' || echo 'failed (dev-1.log)')" "-" "$(run_ok dev-1 && echo 1 || echo 0)"
}
against_cpu() {
  logged cpu-1 "$bin/mpibert" train --model-config "$work/config.json" "${common[@]}" $(per_rank 1) --device cpu \
    --output-dir "$work/cpu-1" || true
  compare "1 rank on $device" cpu-1 dev-1 "$([ "$device" = cuda ] && echo 1e-4 || echo 0)" "1 rank on the CPU"
}
strategy_row() {  # RANKS STRATEGY COMM [OPTION...]
  local n=$1 strategy=$2 comm=$3 name
  shift 3
  name="dev-$n-$strategy-$comm${*:+-$(echo "$*" | tr -c 'a-z0-9\n' '-' | tr -s -)}"
  train "$name" "$n" "$comm" --strategy "$strategy" "$@"
  compare "$n ranks $strategy, $comm${*:+ ($*)}" dev-1 "$name" 1e-5 "1 rank on $device"
}
# Reduced-precision communication: gradients reduced in bf16 (fsdp: its parameters gathered in bf16
# too) on 2 ranks end near 1 rank's fp32 run. By the RMS over the weights (compare_weights.py
# --rms): rounding moves a few weights by AdamW steps of +-lr, which bound the largest difference
# whatever the gradients; the limits are 8x what the CPU gave on 2026-11-26 (2.4e-6, 1.2e-5), where
# wrong gradients give ~1e-3.
bf16_row() {  # STRATEGY
  local strategy=$1 gathers=fp32 limit=2e-5
  [ "$strategy" = fsdp ] && gathers=bf16 limit=1e-4
  train "dev-2-$strategy-$multi-bf16" 2 "$multi" --strategy "$strategy" --reduce-dtype bf16 --param-dtype "$gathers"
  compare "2 ranks $strategy, $multi, gradients in bf16, gathers in $gathers" dev-1 "dev-2-$strategy-$multi-bf16" "$limit" \
    "1 rank on $device" rms
}
reshard_row() {  # zero1's optimizer state saved by 2 ranks, loaded by 3
  train reshard 2 "$multi" --strategy zero1 --stop-after-steps 3
  train reshard 3 "$multi" --strategy zero1 --resume auto
  compare "zero1 stopped on 2 ranks, resumed on 3" dev-1 reshard 1e-5 "1 rank on $device"
}
# Resume: dropout on, so that the RNG state (CPU and CUDA) must come back with the checkpoint.
# With --deterministic bit for bit; without it, the difference that the GPU's atomics leave.
resume_row() {  # deterministic|default
  local mode=$1 flags=()
  local dropout=(--model-config "$work/config-dropout.json" "${common[@]}" $(per_rank 1) --device "$device")
  [ "$mode" = deterministic ] && flags=(--deterministic)
  rm -rf "$work/straight-$mode" "$work/resumed-$mode"
  logged "straight-$mode" "$bin/mpibert" train "${dropout[@]}" "${flags[@]}" --output-dir "$work/straight-$mode" || true
  logged "stopped-$mode" "$bin/mpibert" train "${dropout[@]}" "${flags[@]}" --stop-after-steps 3 --output-dir "$work/resumed-$mode" || true
  logged "resumed-$mode" "$bin/mpibert" train "${dropout[@]}" "${flags[@]}" --resume auto --output-dir "$work/resumed-$mode" || true
  if [ "$mode" = deterministic ]; then
    compare "checkpoint at step 3, resumed (--deterministic)" straight-$mode resumed-$mode 0 "the run never stopped"
  else
    compare "checkpoint at step 3, resumed" straight-$mode resumed-$mode "$([ "$device" = cuda ] && echo 1e-5 || echo 0)" "the run never stopped"
  fi
}
# fp16 with loss scaling: a non-finite gradient on one rank at step 2 (MPIBERT_INJECT_OVERFLOW)
# makes every rank skip that step; 2 ranks end where 1 rank with the same skip does.
fp16_row() {
  MPIBERT_INJECT_OVERFLOW=0:1 train fp16-1 1 auto --fp16
  MPIBERT_INJECT_OVERFLOW=1:1 train "fp16-2-$multi" 2 "$multi" --strategy zero1 --fp16
  compare "fp16, 2 ranks zero1, $multi, step 2 skipped" fp16-1 "fp16-2-$multi" 2e-3 "1 rank fp16 on $device"
  local skipped
  skipped=$("$py" -c 'import json, sys; print(" ".join(str(json.load(open(f)).get("skipped_steps")) for f in sys.argv[1:]))' \
    "$work/fp16-1/results.json" "$work/fp16-2-$multi/results.json" 2>/dev/null || echo "no results")
  record "fp16: steps skipped, 1 rank and 2" "one each" "$skipped" "1 1" "$([ "$skipped" = "1 1" ] && echo 1 || echo 0)"
}
# A rank that fails after its backward (its gradients' collectives in flight), and one killed with
# SIGKILL: the job must end promptly, not wait in a collective.
ended_within() {  # NAME START RC LOG PATTERN: a row for a job that had to fail
  local seconds found=0
  seconds=$("$py" -c 'import sys, time; print("%.1f" % (time.time() - float(sys.argv[1])))' "$2")
  grep -q "$5" "$4" && found=1
  record "$1" "the job ends with its message" "exit $3 after $seconds s, message $([ $found = 1 ] && echo found || echo missing)" \
    "non-zero, 60 s" "$([ "$3" -ne 0 ] && [ $found = 1 ] && "$py" -c 'import sys; sys.exit(float(sys.argv[1]) > 60)' "$seconds" && echo 1 || echo 0)"
}
failing_rank_row() {
  local start rc=0
  start=$(date +%s.%N)
  MPIBERT_INJECT_FAILURE=1:3:backward launch fail 2 "$multi" --strategy ddp --max-steps 6 || rc=$?
  ended_within "rank 1 fails after backward, ddp, $multi" "$start" "$rc" "$work/fail.log" "MPIBERT_INJECT_FAILURE"
}
killed_rank_row() {
  local start rc=0 job
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
}
# Evaluation of one checkpoint on the device and on the CPU.
evaluation_row() {
  if ! run_ok dev-1; then record "evaluation on $device" "the CPU's, same checkpoint" "no checkpoint (dev-1 failed)" "-" 0; return; fi
  local where verdict
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
}
# A profile of steps 2-3: our phases, and on a GPU its kernels.
profile_row() {
  local verdict
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
}
gpu_tests_row() {  # FILTER NAME
  if mpiexec -n 1 --bind-to none "$bin/test_gpu" --gtest_filter="$1" > "$work/test_gpu-$2.log" 2>&1; then
    record "GPU tests: $2" "HF fixture, CPU, eager" "all passed$(sed -n 's/^ *step graphs: / (step graphs: /p' "$work/test_gpu-$2.log" | sed 's/$/)/')" "-" 1
  else
    record "GPU tests: $2" "HF fixture, CPU, eager" "failures ($(grep -c '^\[  FAILED  \]' "$work/test_gpu-$2.log") lines; test_gpu-$2.log)" "-" 0
  fi
}

# --- the encoder families beside HF's own models (bench/families.sh on the GPU) ---------------------
# Each family's base config, mpibert dynamic and packed beside HF's model of the same config on the
# same batches, bf16, batch 32, 20 timed steps; the table lands in --out as families.md.
families_throughput_row() {
  if BIN_DIR="$bin" PYTHON="$py" DEVICE=cuda PRECISION=bf16 BATCH=32 STEPS=20 ROUNDS=1 ARTICLES=0:12 THREADS=4 \
      bash bench/families.sh > "$work/families.log" 2>&1; then
    sed -n '/^| family/,$p' "$work/families.log" > "$out/families.md"
    record "throughput: the encoder families beside HF's own models" "HF, same config and batches" \
      "families.md ($(grep -c '^| [a-z]' "$out/families.md") families)" "-" 1
  else
    record "throughput: the encoder families beside HF's own models" "HF, same config and batches" "failed (families.log)" "-" 0
  fi
}

# --- bert-base on the bundled features (the speed rows) --------------------------------------------
prepare_bert() {
  [ -f "$work/bert-shards/manifest.json" ] ||
    mpirun -n 4 --oversubscribe --bind-to none "$bin/mpibert-prep" --input "$squad" --vocab "$vocab" --out "$work/bert-shards" \
      --split train --log-level warn > "$work/bert-prep.log" 2>&1
  local ok=$?
  record "bert-base shards (SQuAD v1.1 dev, 384/128)" "-" "$([ $ok = 0 ] && echo prepared || echo 'failed (bert-prep.log)')" "-" \
    "$([ $ok = 0 ] && echo 1 || echo 0)"
}
# throughput_row MODEL MODE: STEPS (100) bf16 steps at batch BATCH (32); MODE full, dynamic,
# packed or packed-graphs (packed with --cuda-graphs).
throughput_row() {
  local model=$1 mode=$2 padding graphs=() name label
  padding=${mode%-graphs}
  [ "$mode" = packed-graphs ] && graphs=(--cuda-graphs)
  name=$model-$mode
  label="mpibert, $mode"
  [ "$model" = bert ] || label="mpibert $model-base, $mode"
  rm -rf "${work:?}/$name"
  logged "$name" "$bin/mpibert" train --model-config "bench/$model-base-config.json" --vocab "$vocab" \
    --train-shards "$work/bert-shards" --output-dir "$work/$name" --device cuda --bf16 --padding "$padding" "${graphs[@]}" \
    --batch-size "${BATCH:-32}" --max-steps "${STEPS:-100}" --learning-rate 4e-5 --logging-steps 20 --save-total-limit 1
  local line
  if line=$("$py" - "$work/$name" "$label" <<'PY'
import json, sys
run, label = sys.argv[1:]
r = json.load(open(run + "/results.json"))
u = r["utilization"]
g = r.get("step_graphs")
counts = "%d, %d, %d" % (g["eager_steps"], g["captures"], g["replays"] - g["captures"]) if g else ""
print("| %s | %.1f | %.1f (after step %d) | %.3f (steady %.3f) | %.1f | %.2f GiB | %s |" % (
    label, r["train_step_samples_per_second"], r["train_steady_samples_per_second"], r["steady_after_steps"], u["mfu"],
    u["steady_mfu"], u["model_flops_per_sample"] / 1e9, r.get("peak_gpu_memory_bytes", 0) / 2**30, counts))
PY
  ); then
    speed_row "$line"
    record "throughput: $label" "-" "$(cut -d'|' -f4 <<< "$line" | xargs) samples/s steady" "-" 1
  else
    speed_row "| $label | failed ($name.log) | | | | | |"
    record "throughput: $label" "-" "failed ($name.log)" "-" 0
  fi
}
# HF's Trainer on the same GPU and features (run_qa's preprocessing, padded to 384), steady over
# the steps after its first.
hf_peer_row() {
  local line
  if logged hf-peer "$py" bench/hf_peer/run_qa_peer.py throughput --train-file "$squad" --vocab "$vocab" \
      --config bench/bert-base-config.json --batch "${BATCH:-32}" --steps "${STEPS:-100}" --padding full --bf16 --device cuda &&
     line=$("$py" - "$work/hf-peer.log" <<'PY'
import json, sys
r = json.loads([line for line in open(sys.argv[1]) if line.startswith("{")][-1])
print("| HF Trainer, full | | %.1f (steps 2-%d) | | %.1f | | |" % (r["samples_per_second"], r["steps"] + 1, r["model_flops_per_sample"] / 1e9))
PY
     ); then
    speed_row "$line"
    record "throughput: HF Trainer, full" "-" "$(cut -d'|' -f4 <<< "$line" | xargs) samples/s" "-" 1
  else
    speed_row "| HF Trainer, full | failed (hf-peer.log) | | | | | |"
    record "throughput: HF Trainer, full" "-" "failed (hf-peer.log)" "-" 0
  fi
}
# Where the packed step's time goes, eager and graphed: 5 profiled steps after 20, from the trace.
kernels_row() {  # packed|packed-graphs
  local mode=$1 graphs=() line
  [ "$mode" = packed-graphs ] && graphs=(--cuda-graphs)
  rm -rf "$work/profile-$mode"
  logged "profile-$mode" "$bin/mpibert" train --model-config bench/bert-base-config.json --vocab "$vocab" \
    --train-shards "$work/bert-shards" --output-dir "$work/profile-$mode" --device cuda --bf16 --padding packed "${graphs[@]}" \
    --batch-size "${BATCH:-32}" --max-steps 26 --learning-rate 4e-5 --logging-steps 0 --save-total-limit 1 \
    --profile --profile-wait 18 --profile-warmup 2 --profile-active 5
  if line=$(PYTHONPATH=tools "$py" -m mpibert_tools.kernel_accounting "$work/profile-$mode/profile/trace.json" "$mode" 5); then
    [ -s "$out/kernels.md" ] || printf '%s\n%s\n' "| packed steps 21-25 | kernels/step | GPU busy/step (ms) | step (ms) | gaps (%) | top kernels by time |" \
      "|---|---|---|---|---|---|" > "$out/kernels.md"
    echo "$line" >> "$out/kernels.md"
    record "kernels per packed step: $mode" "-" "$(tail -1 <<< "$line" | cut -d'|' -f3 | xargs) kernels/step" "-" 1
  else
    record "kernels per packed step: $mode" "-" "no trace (profile-$mode.log)" "-" 0
  fi
}

# --- the order: setup, the rows never yet run on a GPU, then the rest ------------------------------
cuda=$([ "$device" = cuda ] && echo 1 || echo 0)
speed=$([ "$cuda" = 1 ] && [ "$throughput" = 1 ] && echo 1 || echo 0)
[ "$checks" = 0 ] || row fixture-shards 120 prepare_fixture
[ "$speed" = 0 ] || row bert-shards 180 prepare_bert
[ "$checks" = 0 ] || [ "$cuda" = 0 ] || row graphs 240 gpu_tests_row 'GpuStepGraphs.*' "replayed steps (--cuda-graphs)"
[ "$checks" = 0 ] || [ "$cuda" = 0 ] || row graphs-failed-capture 60 gpu_tests_row 'GpuFailedCapture.*' "a failed capture (--cuda-graphs)"
if [ "$speed" = 1 ]; then
  row throughput-packed 150 throughput_row bert packed
  row throughput-packed-graphs 150 throughput_row bert packed-graphs
  [ "$peer" = 0 ] || row hf-peer 240 hf_peer_row
  row kernels-packed 120 kernels_row packed
  row kernels-packed-graphs 120 kernels_row packed-graphs
fi
if [ "$checks" = 1 ]; then
  row fp16 120 fp16_row
  row reference 60 reference_run
  row hsdp-groups-of-1 90 strategy_row 2 hsdp "$multi" --shard-group-size 1
  row hsdp 90 strategy_row 2 hsdp "$multi"
fi
[ "$speed" = 0 ] || row distilbert-packed 150 throughput_row distilbert packed
[ "$checks" = 0 ] || [ "$cuda" = 0 ] || row families-packed 180 gpu_tests_row 'Families/GpuFamilies.*' "the encoder families packed"
[ "$speed" = 0 ] || [ "$peer" = 0 ] || row families-throughput 240 families_throughput_row
if [ "$checks" = 1 ]; then
  [ "$cuda" = 0 ] || row gpu-tests 300 gpu_tests_row '-GpuStepGraphs.*:GpuFailedCapture.*:Families/GpuFamilies.*' "the rest of test_gpu"
  row against-cpu 90 against_cpu
  for n in 2 3; do
    for strategy in ddp zero1 zero2 fsdp; do row "$strategy-$n-$multi" 90 strategy_row "$n" "$strategy" "$multi"; done
  done
  if [ "$cuda" = 1 ]; then
    for strategy in ddp zero2; do row "$strategy-2-mpi" 90 strategy_row 2 "$strategy" mpi; done
  fi
  for strategy in ddp zero2 fsdp; do row "$strategy-bf16" 90 bf16_row "$strategy"; done
  row reshard 120 reshard_row
  row resume-deterministic 120 resume_row deterministic
  row resume 120 resume_row default
  row failing-rank 90 failing_rank_row
  row killed-rank 90 killed_rank_row
  row evaluation 90 evaluation_row
  row profile 90 profile_row
fi
if [ "$speed" = 1 ]; then
  row throughput-full 150 throughput_row bert full
  row throughput-dynamic 150 throughput_row bert dynamic
fi

finish
echo
cat "$out/checks.md"
[ ! -s "$speeds" ] || { echo; cat "$speeds"; }
echo "gpu_check: runs and logs in $work; the tables in $out"
if grep -q $'\tFAIL$' "$table"; then echo "gpu_check: FAILED (table above)"; exit 1; fi
if [ ${#unfinished[@]} -gt 0 ]; then echo "gpu_check: every finished row passed; ${#unfinished[@]} not run (the deadline)"; exit 0; fi
echo "gpu_check: every check passed"
