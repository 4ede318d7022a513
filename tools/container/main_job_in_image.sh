#!/usr/bin/env bash
# The main job of scripts/main_job.sh (without its install and build) inside mpibert's image, with
# podman: the repository mounted at its own path, the image's mpibert-prep preparing the bundled
# sample on 2 ranks (scripts/sample_shards.sh) and its mpibert training and evaluating on 2 ranks
# (configs/main_job.toml), into results/container-main. Ends with EM/F1 as scripts/main_job.sh
# does: on the same machine they are the same.
#   tools/container/main_job_in_image.sh [IMAGE]   (default localhost/mpibert:latest)
# PODMAN and PODMAN_ARGS (`podman run` options here) as for tools/container/build_image.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${1:-localhost/mpibert:latest}
root=$(pwd)
run_dir=results/container-main
rm -rf "$run_dir"
# shellcheck disable=SC2086,SC2016
${PODMAN:-podman} run --rm ${PODMAN_ARGS:-} -v "$root:$root" -w "$root" -e MPIBERT_BIN_DIR=/opt/mpibert/bin \
  "$image" bash -c '
    set -euo pipefail
    bash scripts/sample_shards.sh "$1"
    # --bind-to none: each rank runs a compute thread and a communication thread.
    mpirun -n 2 --bind-to none mpibert train --config configs/main_job.toml \
      --train-shards "$1/shards/train" --eval-shards "$1/shards/eval" --output-dir "$1/train"' \
  bash "$run_dir"
echo "container main job ($image): run directory $root/$run_dir/train"
