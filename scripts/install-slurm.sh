#!/usr/bin/env bash
# Installs a one-node SLURM (Debian's slurm-wlm: slurmctld, slurmd, the client commands, the
# basic plugins with mpi/pmix) and munge, only the packages missing, without recommends (as
# scripts/install-deps.sh does). tests/slurm/ uses it; on a real cluster SLURM is already there.
# Exit status 0: installed or already present; 1: could not install (not root and no sudo).
set -euo pipefail

packages=(slurm-wlm slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-slurm: all packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "install-slurm: missing ${missing[*]}, and not root and no password-less sudo" >&2
    exit 1
  fi
fi

echo "install-slurm: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The packages' maintainer scripts try to start the daemons (munge, slurmctld, slurmd) through
# init/systemd; in a container that fails harmlessly. tests/slurm/cluster.sh starts its own.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
