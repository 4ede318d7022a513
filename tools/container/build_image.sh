#!/usr/bin/env bash
# Builds mpibert's OCI image (tools/container/Containerfile) with podman, as root.
#   bash tools/container/build_image.sh [--from-source] [--libs cpu|all] [--base IMAGE] [--tag TAG]
# Default: the programs of build/ (scripts/build.sh mpibert mpibert-prep; run first if missing),
# installed with `cmake --install` into build/container/stage/opt/mpibert by
# tools/container/stage.sh together with the torch wheel's libraries, become the image's
# /opt/mpibert (the Containerfile's `prebuilt` target: a few minutes).
# --from-source: compiles inside the image build instead (target `from-source`: PyPI's torch wheel,
#   4.5 GB, and the whole compile of mpibert; slow on a small machine).
# --libs cpu (default): of the wheel's libraries, those the programs load (enough for CPU runs and
#   the CUDA libraries LibTorch links); all: every library of torch/lib and nvidia/*/lib (cuDNN's
#   engines, NVRTC, cuSOLVER... that CUDA runs may open later; docs/clusters.md).
# --base: the image to start from (the Containerfile's BASE, default debian:12 there). Without it
#   the base is localhost/debian:12-debootstrap, made here with debootstrap (Debian's archive
#   only, no image registry) when podman does not have it.
# --tag: the image's name (default localhost/mpibert:latest).
# PODMAN (default podman) and PODMAN_ARGS (more `podman build` options), word-split: what this
#   machine's podman needs (a VM with hybrid cgroups and no CAP_SYS_RESOURCE needed
#   PODMAN="podman --runtime runc" PODMAN_ARGS="--network host --ulimit nofile=20000:20000":
#   docs/clusters.md, "Building the image").
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tools/container
target=prebuilt libs=cpu base="" tag=localhost/mpibert:latest
while [ $# -gt 0 ]; do
  case "$1" in
    --from-source) target=from-source ;;
    --libs) libs=${2:?--libs cpu|all}; shift ;;
    --base) base=${2:?--base IMAGE}; shift ;;
    --tag) tag=${2:?--tag TAG}; shift ;;
    *) sed -n '2,21s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
  shift
done
case "$libs" in cpu|all) ;; *) echo "container: --libs cpu|all" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "container: run as root (podman's root storage, debootstrap)" >&2; exit 1; }

# The tools, from Debian's archive when missing.
missing=()
# runc too: where crun fails (docs/clusters.md), PODMAN="podman --runtime runc" is the way.
for tool in podman:podman debootstrap:debootstrap runc:runc; do
  command -v "${tool%%:*}" > /dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "container: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" uidmap
fi

# The base: Debian 12 from its archive when no registry's debian:12 is to be used.
if [ -z "$base" ]; then
  base=localhost/debian:12-debootstrap
  if ! ${PODMAN:-podman} image exists "$base"; then
    mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/mpibert-rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' EXIT
    echo "container: debootstrap bookworm (minbase) from $mirror into $rootfs"
    start=$SECONDS
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$rootfs.log" 2>&1 ||
      { tail -30 "$rootfs.log"; exit 1; }
    rm -f "$rootfs.log"
    # Security updates as in the registry's debian:12; no package lists or caches in the layer.
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
      "$mirror" "$mirror" > "$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    tar -C "$rootfs" --numeric-owner -c . | ${PODMAN:-podman} import --quiet --change 'CMD ["/bin/bash"]' - "$base" > /dev/null
    rm -rf "$rootfs"; trap - EXIT
    echo "container: $base made in $((SECONDS - start)) s"
  fi
fi

start=$SECONDS
if [ "$target" = prebuilt ]; then
  if [ ! -x build/bin/mpibert ] || [ ! -x build/bin/mpibert-prep ]; then bash scripts/build.sh mpibert mpibert-prep; fi
  context=build/container/stage
  rm -rf "$context"
  bash "$here/stage.sh" build "$context" "$libs"
else
  # The repository's files as git knows them (tracked and new, not ignored): no build trees or .venv.
  context=build/container/source
  rm -rf "$context"; mkdir -p "$context"
  git ls-files -z --cached --others --exclude-standard |
    tar -c --null -T - --ignore-failed-read 2> /dev/null | tar -C "$context" -x
fi
# shellcheck disable=SC2086
${PODMAN:-podman} build ${PODMAN_ARGS:-} --target "$target" --build-arg "BASE=$base" --build-arg "LIBS=$libs" \
  -f "$here/Containerfile" -t "$tag" "$context"
echo "container: $tag built in $((SECONDS - start)) s (target $target, libraries $libs, base $base):" \
  "$(${PODMAN:-podman} image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.2f GB", $1 / 1e9}')"
