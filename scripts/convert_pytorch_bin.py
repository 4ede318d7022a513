"""Converts an HF model directory's pytorch_model.bin to model.safetensors, which mpibert reads.

    .venv/bin/python3 scripts/convert_pytorch_bin.py MODEL_DIR [--out DIR] [--force]

Reads MODEL_DIR/pytorch_model.bin (torch.save's zip or legacy format) or the shards that
pytorch_model.bin.index.json lists, with torch.load(weights_only=True): no code in the file runs.
Writes model.safetensors into MODEL_DIR, or into --out with config.json, vocab.txt and the
tokenizer files copied beside it. Needs only torch (the .venv's: scripts/install-deps.sh), not the
safetensors package.

What HF's from_pretrained would do on loading, done once here: old LayerNorm names (gamma, beta)
become weight and bias, and tensors that share their storage (tied weights: the MLM decoder and the
word embeddings) are written once, under the name that is not the head's. Every tensor written is
read back and compared byte for byte before the file is renamed into place; on any error nothing
is left under the final name.
"""

import argparse
import ctypes
import json
import os
import shutil
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
          torch.bool: "BOOL"}
BESIDE_THE_WEIGHTS = ("config.json", "vocab.txt", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")


class ConversionError(Exception):
    pass


def load_state_dict(path):
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a file that is not a checkpoint
        raise ConversionError("%s: cannot be read as a PyTorch checkpoint: %s" % (path, str(e).splitlines()[0]))
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not state:
        raise ConversionError("%s: expected a state_dict (names to tensors), found %s" % (path, type(state).__name__))
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise ConversionError("%s: entry %r is a %s, not a tensor" % (path, name, type(value).__name__))
    return state


def read_checkpoint(model_dir):
    single = os.path.join(model_dir, "pytorch_model.bin")
    index = single + ".index.json"
    if os.path.isfile(single):
        return load_state_dict(single)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (ValueError, KeyError, AttributeError, TypeError) as e:
            raise ConversionError("%s: not a shard index (a JSON object with weight_map): %s" % (index, e))
        state = {}
        for shard in shards:
            state.update(load_state_dict(os.path.join(model_dir, shard)))
        return state
    raise ConversionError("%s: no pytorch_model.bin (nor pytorch_model.bin.index.json) to convert" % model_dir)


def modern_name(name):
    """HF's renaming on load: LayerNorm.gamma/beta of old checkpoints are weight/bias."""
    if name.endswith("LayerNorm.gamma"):
        return name[:-len("gamma")] + "weight"
    if name.endswith("LayerNorm.beta"):
        return name[:-len("beta")] + "bias"
    return name


def without_tied_copies(state):
    """One name per shared tensor (same storage, offset, shape and strides), preferring the
    encoder's name over a head's (cls.*): the tied word embeddings stay under their own name."""
    kept, seen = {}, {}
    for name in sorted(state, key=lambda n: (n.startswith("cls."), n)):
        tensor = state[name]
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() and key in seen:
            print("convert: %s is %s (tied), written once" % (name, seen[key]), file=sys.stderr)
            continue
        seen[key] = name
        kept[name] = tensor
    return kept


def tensor_bytes(tensor):
    tensor = tensor.detach().contiguous()
    return ctypes.string_at(tensor.data_ptr(), tensor.numel() * tensor.element_size()) if tensor.numel() else b""


def safetensors_image(state):
    """The file's bytes: an 8-byte little-endian header length, the JSON header (padded with
    spaces to a multiple of 8), then every tensor's bytes."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    # Wider types first, so that every tensor starts at a multiple of its element size.
    for name in sorted(state, key=lambda n: (-state[n].element_size(), n)):
        tensor = state[name]
        if tensor.dtype not in DTYPES:
            raise ConversionError("tensor %s has dtype %s, which safetensors cannot hold" % (name, tensor.dtype))
        data = tensor_bytes(tensor)
        header[name] = {"dtype": DTYPES[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, blobs


def verify(path, state):
    """Reads the written file back: the header's names, dtypes and shapes, and every tensor's bytes."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        base = 8 + length
        for name, tensor in state.items():
            entry = header.get(name)
            if entry is None or entry["dtype"] != DTYPES[tensor.dtype] or entry["shape"] != list(tensor.shape):
                raise ConversionError("%s: read back, %s does not match what was written" % (path, name))
            begin, end = entry["data_offsets"]
            f.seek(base + begin)
            if f.read(end - begin) != tensor_bytes(tensor):
                raise ConversionError("%s: read back, the bytes of %s differ" % (path, name))


def write_safetensors(path, state):
    staging = "%s.tmp-%d" % (path, os.getpid())
    try:
        head, blobs = safetensors_image(state)
        with open(staging, "wb") as f:
            f.write(head)
            for blob in blobs:
                f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        verify(staging, state)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.remove(staging)
        raise


def convert(model_dir, out_dir, force):
    target = os.path.join(out_dir, "model.safetensors")
    if os.path.exists(target) and not force:
        raise ConversionError("%s exists already (--force replaces it)" % target)
    state = read_checkpoint(model_dir)
    renamed = {}
    for name, tensor in state.items():
        new = modern_name(name)
        if new in renamed:
            raise ConversionError("%s: both %s and another name for %s" % (model_dir, name, new))
        renamed[new] = tensor
    state = without_tied_copies(renamed)
    os.makedirs(out_dir, exist_ok=True)
    if os.path.realpath(out_dir) != os.path.realpath(model_dir):
        for name in BESIDE_THE_WEIGHTS:
            if os.path.isfile(os.path.join(model_dir, name)):
                shutil.copyfile(os.path.join(model_dir, name), os.path.join(out_dir, name))
    write_safetensors(target, state)
    total = sum(t.numel() for t in state.values())
    print("convert: %s: %d tensors, %d values (%s)" % (target, len(state), total,
                                                        ", ".join(sorted({DTYPES[t.dtype] for t in state.values()}))))


def main(argv):
    parser = argparse.ArgumentParser(prog="convert_pytorch_bin.py", description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", help="HF model directory holding pytorch_model.bin")
    parser.add_argument("--out", help="write there instead of MODEL_DIR (config and tokenizer files copied)")
    parser.add_argument("--force", action="store_true", help="replace an existing model.safetensors")
    args = parser.parse_args(argv)
    try:
        convert(args.model_dir, args.out or args.model_dir, args.force)
    except (ConversionError, OSError) as e:
        print("convert: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
