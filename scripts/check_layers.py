#!/usr/bin/env python3
"""Fails when a file of src/LAYER or include/mpibert/LAYER includes a header of a layer it may not
know: a higher layer, or a sibling that is not listed below. Also fails on a source or header that
sits in no layer folder, on an include of a project header that does not exist, and on modules of
one layer that include each other, directly or around a circle (a module is a header and its .cpp:
include/mpibert/runtime/peers.hpp with src/runtime/peers.cpp).

    python3 scripts/check_layers.py [REPO_ROOT]

The allowed directions, written once (each layer may include itself and the layers it lists):
"""
import pathlib
import re
import sys

LAYERS = {
    "core": [],                                          # errors, files, UTF-8, logging, process, time
    "text": ["core"],                                    # the WordPiece tokenizer
    "data": ["core", "text"],                            # SQuAD, features, shards, sampler, batches
    "runtime": ["core"],                                 # the MPI session, host collectives, peers, placement, devices
    "comm": ["core", "runtime"],                         # the Communicator: MPI and NCCL backends, the ring
    "nn": ["core"],                                      # any model's training kit: safetensors, AdamW, the model description
    "parallel": ["core", "runtime", "comm", "nn"],       # the data-parallel strategies, knowing no BERT
    "model": ["core", "text", "nn"],                     # BERT-QA, HF model dirs, FLOPs
    "eval": ["core", "text", "data"],                    # answer extraction, the official metrics
    "train": ["core", "text", "data", "runtime", "comm", "nn", "parallel", "model", "eval"],  # the model on batches, evaluation, trainer
    "cli": ["core", "text", "data", "runtime", "comm", "nn", "parallel", "model", "eval", "train"],  # the subcommands
}
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cc"}
PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s+"mpibert/([^"/]+)/([^"]+)"', re.M)
ANY_PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s+"(mpibert/[^"]+)"', re.M)


def layer_of(path: pathlib.Path, root: pathlib.Path):
    relative = path.relative_to(root).parts
    if relative[0] == "src" and len(relative) > 2:
        return relative[1]
    if relative[:2] == ("include", "mpibert") and len(relative) > 3:
        return relative[2]
    return None


def check(root: pathlib.Path):
    problems = []
    files = [p for folder in ("src", "include/mpibert") for p in sorted((root / folder).rglob("*"))
             if p.suffix in SOURCE_SUFFIXES]
    for path in files:
        name = path.relative_to(root)
        layer = layer_of(path, root)
        if layer not in LAYERS:
            problems.append(f"{name}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        text = path.read_text(encoding="utf-8")
        for include in ANY_PROJECT_INCLUDE.findall(text):
            if not (root / "include" / include).is_file():
                problems.append(f"{name}: includes \"{include}\", which is not a header under include/")
        for used, header in PROJECT_INCLUDE.findall(text):
            if used != layer and used not in LAYERS[layer]:
                allowed = ", ".join(LAYERS[layer]) or "none"
                problems.append(f"{name}: layer {layer} includes mpibert/{used}/{header} "
                                f"(layer {used}); {layer} may include {allowed}")
    return files, problems


def module_of(path: pathlib.Path, root: pathlib.Path):
    relative = path.relative_to(root).parts
    layer = layer_of(path, root)
    return f"{layer}/{path.stem}" if layer else None


def module_circles(root: pathlib.Path, files):
    """Circles in the graph of modules, each as a list of module names (first repeated last)."""
    graph = {}
    for path in files:
        module = module_of(path, root)
        if module is None:
            continue
        used = graph.setdefault(module, set())
        for layer, header in PROJECT_INCLUDE.findall(path.read_text(encoding="utf-8")):
            other = f"{layer}/{pathlib.PurePath(header).stem}"
            if other != module:
                used.add(other)
    circles, state, stack = [], {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                circles.append(stack[stack.index(other):] + [other])
            elif other not in state:
                visit(other)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return circles


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    for layer, below in LAYERS.items():  # the table itself must be acyclic and ordered bottom up
        order = list(LAYERS)
        for used in below:
            assert order.index(used) < order.index(layer), f"LAYERS lists {used} below {layer} but after it"
    files, problems = check(root)
    problems += [f"modules include each other: {' -> '.join(circle)}" for circle in module_circles(root, files)]
    for problem in problems:
        print(problem)
    print(f"check_layers: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
