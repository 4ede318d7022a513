#!/usr/bin/env bash
# Forward+backward samples/s and peak RSS at seq 384: bert-base (batch 2) and the small config
# (batch 32), 1 and 2 threads; C++ (fused and separate Q/K/V) beside Python PyTorch when Debian's
# python3-torch is installed (apt-get install python3-torch). Run after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-5}
for preset in small base; do
  for threads in 1 2; do
    build/bin/bench_model --preset "$preset" --threads "$threads" --steps "$steps"
    build/bin/bench_model --preset "$preset" --threads "$threads" --steps "$steps" --separate-qkv
    if /usr/bin/python3 -c "import torch" 2>/dev/null; then
      /usr/bin/python3 bench/bench_model_pytorch.py --preset "$preset" --threads "$threads" --steps "$steps"
    fi
  done
done
