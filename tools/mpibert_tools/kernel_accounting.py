"""Where a profiled window of training steps spends the GPU's time, from mpibert's Chrome trace
(--profile): kernels launched per step, the GPU-busy time per step (the union of kernel intervals),
the span from the first kernel's start to the last one's end per step, the share of that span with
no kernel running (gaps: the GPU waiting for the host), and the kernels that take the most time.
Prints one Markdown table row, as scripts/gpu_check.sh collects them:

    python3 -m mpibert_tools.kernel_accounting TRACE LABEL STEPS
"""

import json
import sys
from collections import defaultdict


def kernel_intervals(trace):
    """(start, end, name) in microseconds of every GPU kernel of a Chrome trace."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("name", "?"))
                  for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")


def busy_time(intervals):
    """The length of the union of the intervals (kernels on several streams may overlap)."""
    busy, reach = 0.0, None
    for start, end, _ in intervals:
        if reach is None or start > reach:
            busy += end - start
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    return busy


def account(trace, steps, top=3):
    kernels = kernel_intervals(trace)
    if not kernels:
        raise ValueError("the trace holds no GPU kernel")
    span = max(end for _, end, _ in kernels) - kernels[0][0]
    busy = busy_time(kernels)
    by_name = defaultdict(float)
    for start, end, name in kernels:
        by_name[name] += end - start
    heaviest = sorted(by_name.items(), key=lambda item: -item[1])[:top]
    return {
        "kernels_per_step": len(kernels) / steps,
        "busy_ms_per_step": busy / steps / 1e3,
        "span_ms_per_step": span / steps / 1e3,
        "gap_percent": 100.0 * (1.0 - busy / span) if span > 0 else 0.0,
        "top": [(name, seconds / steps / 1e3) for name, seconds in heaviest],
    }


def table_row(label, figures):
    top = "; ".join("%s %.2f ms" % (name[:60], ms) for name, ms in figures["top"])
    return "| %s | %.0f | %.2f | %.2f | %.1f | %s |" % (label, figures["kernels_per_step"], figures["busy_ms_per_step"],
                                                     figures["span_ms_per_step"], figures["gap_percent"], top)


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    path, label, steps = argv[1], argv[2], int(argv[3])
    with open(path) as f:
        print(table_row(label, account(json.load(f), steps)))


if __name__ == "__main__":
    main(sys.argv)
