"""Two tools/measure_scaling.sh outputs side by side, the runs before a change and after it: Open
MPI's tuned collectives (COLLECTIVES=openmpi) against mpibert's ring, or the word embedding
all-reduced dense (EMBEDDING=dense) against by touched rows.

    tools/compare-runs BEFORE_DIR AFTER_DIR

For every run present in both, per step: the step time, the gradient bytes a rank reduced, the
gradient transfer after backward (the exposed part) and the wait after backward (both means over
the ranks), and the final training loss of each (the same weights within round-off: only the order
of addition differs); then bench_allreduce's time at the largest size, per operation, where both
have it. Each side is named by the link.json setting in which they differ. Markdown on stdout;
standard library only.
"""

import json
import os
import sys


def run_figures(directory):
    with open(os.path.join(directory, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    steps = results["global_step"]
    parallel = results["parallel"]
    return {"step": results["train_step_seconds"] / steps,
            "bytes": parallel["gradient_bytes_reduced_per_rank"] / steps,
            "after": parallel["gradient_transfer_after_backward_seconds_mean"] / steps,
            "wait": parallel["wait_after_backward_seconds_mean"] / steps,
            "loss": results["train_loss"]}


def largest_size_time(path):
    """{op: (bytes, microseconds)} of the largest size in a bench_allreduce output."""
    best, op = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if line.startswith("# ") and len(fields) == 2:
                op = fields[1]
            elif op and fields and fields[0].isdigit() and len(fields) >= 7:
                size, micros = int(fields[0]), float(fields[3])
                if op not in best or size > best[op][0]:
                    best[op] = (size, micros)
    return best


def common_runs(before, after):
    return sorted(n for n in os.listdir(after) if os.path.isfile(os.path.join(after, n, "results.json"))
                  and os.path.isfile(os.path.join(before, n, "results.json")))


def side_names(before, after, names):
    """("openmpi", "ring"), ("dense", "sparse"): the first link.json setting the two sides differ in."""
    for name in names:
        with open(os.path.join(before, name, "link.json"), encoding="utf-8") as f:
            a = json.load(f)
        with open(os.path.join(after, name, "link.json"), encoding="utf-8") as f:
            b = json.load(f)
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return str(a.get(key, "before")), str(b.get(key, "after"))
    return "before", "after"


def run_table(before, after, names, sides):
    x, y = sides
    lines = [f"| run | step s ({x} → {y}) | MB reduced/step | transfer after backward s/step | "
             f"wait after backward s/step | train loss ({x} / {y}) |",
             "|---|--:|--:|--:|--:|---|"]
    for name in names:
        a, b = run_figures(os.path.join(before, name)), run_figures(os.path.join(after, name))
        lines.append("| %s | %.3f → %.3f (%.2f×) | %.2f → %.2f | %.3f → %.3f | %.3f → %.3f | %.7f / %.7f |" % (
            name, a["step"], b["step"], a["step"] / b["step"], a["bytes"] / 1e6, b["bytes"] / 1e6,
            a["after"], b["after"], a["wait"], b["wait"], a["loss"], b["loss"]))
    return "\n".join(lines)


def bandwidth_table(before, after, sides):
    names = sorted(n for n in os.listdir(after) if n.startswith("allreduce-") and os.path.isfile(os.path.join(before, n)))
    if not names:
        return ""
    lines = [f"| link, ranks | operation | size | ms {sides[0]} → {sides[1]} |", "|---|---|--:|--:|"]
    for name in names:
        a, b = largest_size_time(os.path.join(before, name)), largest_size_time(os.path.join(after, name))
        for op in sorted(set(a) & set(b)):
            lines.append("| %s | %s | %d MiB | %.1f → %.1f (%.2f×) |" % (
                name[len("allreduce-"):-len(".txt")], op, a[op][0] >> 20, a[op][1] / 1e3, b[op][1] / 1e3,
                a[op][1] / b[op][1]))
    return "\n".join(lines)


def main(argv):
    """argv: BEFORE_DIR AFTER_DIR (the arguments, without the program's name)."""
    if len(argv) != 2:
        sys.exit(__doc__)
    before, after = argv
    names = common_runs(before, after)
    sides = side_names(before, after, names)
    print(run_table(before, after, names, sides))
    bandwidth = bandwidth_table(before, after, sides)
    if bandwidth:
        print()
        print(bandwidth)
    return 0


def cli():
    """The console script (pyproject.toml's [project.scripts])."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    cli()
