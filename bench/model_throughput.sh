#!/usr/bin/env bash
# Forward+backward samples/s and peak RSS at seq 384: bert-base (batch 2) and the small config
# (batch 32), 1 and 2 threads; C++ (fused and separate Q/K/V) beside Python PyTorch: the same
# torch 2.11.0 that mpibert builds against (.venv, scripts/install-deps.sh). Run after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-5}
for preset in small base; do
  for threads in 1 2; do
    build/bin/bench_model --preset "$preset" --threads "$threads" --steps "$steps"
    build/bin/bench_model --preset "$preset" --threads "$threads" --steps "$steps" --separate-qkv
    if .venv/bin/python3 -c "import torch" 2>/dev/null; then
      .venv/bin/python3 bench/bench_model_pytorch.py --preset "$preset" --threads "$threads" --steps "$steps"
    fi
  done
done
