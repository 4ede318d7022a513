"""The largest difference between two checkpoints' weights (model.safetensors), standard library only.

    compare_weights.py A B [--all] [--rms]

A and B are model.safetensors files, or directories holding one. Prints the largest |a - b| over
the float32 tensors both hold (they must hold the same names and shapes), and the tensor where it
is. Without --all, three tensors are left out whose gradient is zero in exact arithmetic
(qa_outputs.bias, every attention key bias, the last layer's output LayerNorm bias: the softmaxes
ignore a shift shared by every position): their computed gradients are rounding noise, which AdamW
turns into steps of +-lr whose sign depends on the summation order, so they differ between runs
that sum in another order (ranks, devices) by design. --rms prints the root mean square of a - b
over the same elements instead (and the element count): where rounding is expected to move a few
elements by AdamW steps of +-lr (gradients reduced in bf16), the maximum is bounded by the
learning rate whatever the gradients were, while the RMS separates rounding from wrong gradients.
Exit status 2 when the files do not match
in names or shapes.
"""

import argparse
import array
import json
import math
import os
import re
import struct
import sys


def read_tensors(path):
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    header.pop("__metadata__", None)
    base = 8 + length
    return {name: (entry["dtype"], entry["shape"], raw[base + entry["data_offsets"][0]:base + entry["data_offsets"][1]])
            for name, entry in header.items()}


def zero_true_gradient(name, last_layer):
    return (name.endswith("qa_outputs.bias") or name.endswith("attention.self.key.bias")
            or name.endswith("layer.%d.output.LayerNorm.bias" % last_layer))


def compared_pairs(a, b, keep_all):
    """(name, a's values, b's values) of the float32 tensors compared."""
    if sorted(a) != sorted(b):
        raise ValueError("the tensors differ in names: %s" % sorted(set(a) ^ set(b)))
    layers = [int(m.group(1)) for n in a for m in [re.search(r"encoder\.layer\.(\d+)\.", n)] if m]
    last_layer = max(layers) if layers else -1
    pairs = []
    for name in sorted(a):
        dtype, shape, data = a[name]
        if (dtype, shape) != b[name][:2]:
            raise ValueError("%s: %s %s against %s %s" % (name, dtype, shape, b[name][0], b[name][1]))
        if dtype != "F32" or (not keep_all and zero_true_gradient(name, last_layer)):
            continue
        pairs.append((name, array.array("f", data), array.array("f", b[name][2])))
    return pairs


def rms_difference(a, b, keep_all):
    squares, count = 0.0, 0
    for _, x, y in compared_pairs(a, b, keep_all):
        squares += sum((p - q) ** 2 for p, q in zip(x, y))
        count += len(x)
    return math.sqrt(squares / count) if count else 0.0, count


def max_difference(a, b, keep_all):
    worst, where = 0.0, ""
    for name, x, y in compared_pairs(a, b, keep_all):
        difference = max((abs(p - q) for p, q in zip(x, y)), default=0.0)
        if difference > worst:
            worst, where = difference, name
    return worst, where


def main(argv):
    parser = argparse.ArgumentParser(prog="compare_weights.py", description=__doc__.split("\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--all", action="store_true", help="compare the zero-gradient tensors too")
    parser.add_argument("--rms", action="store_true", help="the root mean square difference instead of the largest")
    args = parser.parse_args(argv)
    try:
        a, b = read_tensors(args.a), read_tensors(args.b)
        if args.rms:
            rms, count = rms_difference(a, b, args.all)
            print("%.3g over %d elements" % (rms, count))
        else:
            worst, where = max_difference(a, b, args.all)
            print("%.3g %s" % (worst, where or "-"))
    except (OSError, ValueError, KeyError) as e:
        print("compare_weights: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
