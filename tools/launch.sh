#!/usr/bin/env bash
# The launchers' common part (tools/compare, tools/scaling-model, tools/compare-runs):
#   tools/launch.sh MODULE ARGS...   runs mpibert_tools.MODULE with ARGS
# with this checkout's mpibert_tools first on the path, under the first Python of:
# MPIBERT_TOOLS_PYTHON, the checkout's .venv or MPIBERT_VENV (where scripts/install-deps.sh installs the package
# and its dependencies), python3 on PATH (where `pip install ./tools` was done).
set -euo pipefail
tools=$(cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")" && pwd)
module=${1:?usage: tools/launch.sh MODULE ARGS...}
shift
python=${MPIBERT_TOOLS_PYTHON:-}
if [ -z "$python" ]; then
  venv=${MPIBERT_VENV:-.venv}  # as scripts/install-deps.sh: relative to the repository root
  case $venv in /*) ;; *) venv=$tools/../$venv ;; esac
  if [ -x "$venv/bin/python3" ]; then python=$venv/bin/python3; else python=python3; fi
fi
export PYTHONPATH=$tools${PYTHONPATH:+:$PYTHONPATH}
exec "$python" -m "mpibert_tools.$module" "$@"
