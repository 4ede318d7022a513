#!/usr/bin/env python3
"""Fails when a file of src/LAYER or include/mpibert/LAYER includes a header of a layer it may not
know: a higher layer, or a sibling that is not listed below. Every #include is resolved to a file
first, as the compiler would find it: quoted ones in the including file's folder and then under
include/ (relative paths like "../train/trainer_impl.hpp" included), angle-bracket ones under
include/ (any other is a system or third-party header). Also fails on a source or header that sits
in no layer folder, on a quoted include that resolves to no file (generated headers excepted, by
name below), on a private header of a layer (a header under src/LAYER/) included from another
layer, and on modules that include each other, directly or around a circle (a module is a header
and its .cpp: include/mpibert/runtime/peers.hpp with src/runtime/peers.cpp; src/parallel's
private headers are modules too). And fails where train/, eval/ or cli/ name a concrete model:
they speak to the QA model interface (nn/qa_model.hpp) and build models through
model/model_registry.hpp, so no identifier there may be one of the model layer's models (each
TORCH_MODULE it declares, its Impl, and the *Config structs beside them), and no file there may
include a header that declares one.

    python3 scripts/check_layers.py [REPO_ROOT]

The allowed directions, written once (each layer may include itself and the layers it lists):
"""
import pathlib
import re
import sys

LAYERS = {
    "core": [],                                          # errors, files, UTF-8, logging, process, time
    "text": ["core"],                                    # the tokenizers: HF's tokenizer.json, slow files converted
    "data": ["core", "text"],                            # SQuAD, features, shards, sampler, batches
    "runtime": ["core"],                                 # the MPI session, host collectives, peers, placement, devices
    "comm": ["core", "runtime"],                         # the Communicator: MPI and NCCL backends, the ring
    "nn": ["core"],                                      # the model interface: the QA model, its description, safetensors
    "optim": ["core"],                                   # the optimizer kit: AdamW, learning-rate schedules, the loss scaler
    "parallel": ["core", "runtime", "comm", "nn", "optim"],  # the data-parallel strategies, knowing no BERT
    "model": ["core", "text", "nn"],                     # the QA model and its encoder families, HF model dirs, FLOPs
    "eval": ["core", "text", "data", "runtime", "nn"],    # the model on batches, evaluation, answer extraction, the metrics
    "report": ["core"],                                  # the trackers: their interface, MLflow over REST, the W&B companion
    "train": ["core", "text", "data", "runtime", "comm", "nn", "optim", "parallel", "model", "eval", "report"],  # the trainer
    "cli": ["core", "text", "data", "runtime", "comm", "nn", "optim", "parallel", "model", "eval", "report", "train"],  # the subcommands
}
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cc"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# Headers the build generates (protoc's), which no checkout holds.
GENERATED = {"tensorboard_event.pb.h", "sentencepiece_model.pb.h"}
# The layers that must know no concrete model, and what declares one in the model layer.
MODEL_AGNOSTIC = ("train", "eval", "cli")
TORCH_MODULE = re.compile(r"\bTORCH_MODULE\((\w+)\)")
CONFIG_STRUCT = re.compile(r"^\s*struct\s+(\w+Config)\b", re.M)
IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def layer_of(path: pathlib.Path, root: pathlib.Path):
    relative = path.relative_to(root).parts
    if relative[0] == "src" and len(relative) > 2:
        return relative[1]
    if relative[:2] == ("include", "mpibert") and len(relative) > 3:
        return relative[2]
    return None


def resolve(include, quoted, path: pathlib.Path, root: pathlib.Path):
    """The project file an #include names, or None (a system header, or nothing)."""
    candidates = ([path.parent / include] if quoted else []) + [root / "include" / include]
    for candidate in candidates:
        if candidate.is_file():
            return pathlib.Path(*[part for part in candidate.resolve().relative_to(root.resolve()).parts])
    return None


def includes(path: pathlib.Path, root: pathlib.Path):
    """(as written, the project file it resolves to relative to root, or None) for each #include."""
    text = path.read_text(encoding="utf-8")
    return [(("\"%s\"" if kind == '"' else "<%s>") % include, resolve(include, kind == '"', path, root))
            for kind, include in INCLUDE.findall(text)]


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
        for written, target in includes(path, root):
            if target is None:
                quoted = written.startswith('"')
                if written.startswith('"mpibert/') or written.startswith("<mpibert/"):
                    problems.append(f"{name}: includes {written}, which is not a header under include/")
                elif quoted and written.strip('"') not in GENERATED:
                    problems.append(f"{name}: includes {written}, which is no file beside it or under include/")
                continue
            used = layer_of(root / target, root)
            if used is None:
                problems.append(f"{name}: includes {written} ({target}), which is in no layer")
                continue
            if used != layer and used not in LAYERS[layer]:
                allowed = ", ".join(LAYERS[layer]) or "none"
                problems.append(f"{name}: layer {layer} includes {written} ({target}, layer {used}); "
                                f"{layer} may include {allowed}")
            elif target.parts[0] == "src" and used != layer:
                problems.append(f"{name}: includes {written}, a private header of layer {used} ({target}); "
                                f"other layers include its public headers (include/mpibert/{used}/)")
    return files, problems


def concrete_models(root: pathlib.Path):
    """The model layer's models: {name: header} for every TORCH_MODULE (and its Impl) and every
    *Config struct declared under include/mpibert/model and src/model."""
    names = {}
    for folder in ("include/mpibert/model", "src/model"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES:
                continue
            text = path.read_text(encoding="utf-8")
            header = str(path.relative_to(root))
            for name in TORCH_MODULE.findall(text):
                names[name] = names[name + "Impl"] = header
            for name in CONFIG_STRUCT.findall(text):
                names[name] = header
    return names


def model_agnostic_problems(root: pathlib.Path, files):
    """Files of train/, eval/ and cli/ that name a concrete model or include a header declaring one."""
    models = concrete_models(root)
    declaring = {pathlib.PurePath(header) for header in models.values()}
    problems = []
    for path in files:
        if layer_of(path, root) not in MODEL_AGNOSTIC:
            continue
        name = path.relative_to(root)
        text = path.read_text(encoding="utf-8")
        for written, target in sorted({(w, t) for w, t in includes(path, root) if t is not None and t in declaring}):
            problems.append(f"{name}: includes {written}, which declares a concrete model; "
                            f"{layer_of(path, root)} speaks to nn/qa_model.hpp and model/model_registry.hpp")
        named = sorted({word for word in IDENTIFIER.findall(COMMENT.sub("", text)) if word in models})
        if named:
            problems.append(f"{name}: names the concrete model(s) {', '.join(named)} "
                            f"(declared in {', '.join(sorted({models[n] for n in named}))})")
    return problems


def module_of(path: pathlib.Path, root: pathlib.Path):
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
        for _, target in includes(path, root):
            other = module_of(root / target, root) if target is not None else None
            if other is not None and other != module:
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
    problems += model_agnostic_problems(root, files)
    problems += [f"modules include each other: {' -> '.join(circle)}" for circle in module_circles(root, files)]
    for problem in problems:
        print(problem)
    print(f"check_layers: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
