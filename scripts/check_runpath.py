"""Checks that a program loads the CUDA libraries it was built against, from where it was built.

    check_runpath.py BINARY [--wheel-dir DIR]...

Reads the program's RUNPATH and the libraries it needs (`readelf -d`). For every CUDA library among
them (the CUDA runtime, NCCL, LibTorch's CUDA parts), the first RUNPATH folder that holds it must
be one of the LibTorch wheel's (--wheel-dir, default: every RUNPATH folder under a site-packages
folder), and no RUNPATH folder may hold a CUDA runtime of another major version (two runtimes in
one process). Then every library the program needs must resolve: `ldd` finds none missing.
Exit status 1 with the problems named, 0 with one line per CUDA library saying where it loads from.
"""

import argparse
import os
import re
import subprocess
import sys

CUDA_LIBRARY = re.compile(r"^lib(cudart|nccl|torch_cuda|c10_cuda|cublas|cublasLt|cudnn|nvrtc)\b")
RUNTIME = re.compile(r"^libcudart\.so\.(\d+)")


def dynamic_section(binary):
    """(needed libraries, RUNPATH folders) from `readelf -d`."""
    text = subprocess.run(["readelf", "-d", binary], check=True, capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text)
    runpath = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]*)\]", text)
    origin = os.path.dirname(os.path.abspath(binary))
    folders = [f.replace("$ORIGIN", origin) for f in runpath.group(1).split(":")] if runpath else []
    return needed, [os.path.normpath(f) for f in folders if f]


def runpath_problems(needed, folders, wheel_dirs, listdir):
    """The problems, and where each CUDA library loads from. `listdir(folder)` gives a folder's
    file names ([] for a missing one), so that the rule is tested without a file system."""
    contents = {folder: set(listdir(folder)) for folder in folders}
    problems, found = [], []
    wanted_runtime = None
    for library in needed:
        if not CUDA_LIBRARY.match(library):
            continue
        runtime = RUNTIME.match(library)
        if runtime:
            wanted_runtime = runtime.group(1)
        first = next((folder for folder in folders if library in contents[folder]), None)
        if first is None:
            problems.append("%s is in no RUNPATH folder (%s)" % (library, ":".join(folders) or "no RUNPATH"))
        elif not any(first == w or first.startswith(w.rstrip("/") + "/") for w in wheel_dirs):
            problems.append("%s loads from %s, which is not the LibTorch wheel's (%s)" % (library, first, ", ".join(wheel_dirs)))
        else:
            found.append("%s from %s" % (library, first))
    if wanted_runtime:
        for folder in folders:
            for name in sorted(contents[folder]):
                other = RUNTIME.match(name)
                if other and other.group(1) != wanted_runtime:
                    problems.append("%s in %s is CUDA %s's runtime, beside the CUDA %s one the program needs: two runtimes "
                                    "in one process" % (name, folder, other.group(1), wanted_runtime))
    return problems, found


def listdir(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def missing_libraries(binary):
    text = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return [line.strip() for line in text.splitlines() if "not found" in line]


def main(argv):
    parser = argparse.ArgumentParser(prog="check_runpath.py", description=__doc__.split("\n")[0])
    parser.add_argument("binary")
    parser.add_argument("--wheel-dir", action="append", default=[], help="a folder of the LibTorch wheel's libraries")
    args = parser.parse_args(argv)
    needed, folders = dynamic_section(args.binary)
    wheel_dirs = [os.path.abspath(d) for d in args.wheel_dir] or [f for f in folders if "/site-packages/" in f]
    problems, found = runpath_problems(needed, folders, wheel_dirs, listdir)
    problems += ["ldd: " + line for line in missing_libraries(args.binary)]
    for line in found:
        print("check_runpath: %s: %s" % (args.binary, line))
    for problem in problems:
        print("check_runpath: %s: %s" % (args.binary, problem), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
