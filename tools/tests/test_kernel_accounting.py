"""Tests of tools/mpibert_tools/kernel_accounting.py on small traces written here.

Run from this directory:  /usr/bin/python3 -m unittest test_kernel_accounting
"""

import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from mpibert_tools import kernel_accounting  # noqa: E402


def kernel(ts, dur, name):
    return {"ph": "X", "cat": "kernel", "ts": ts, "dur": dur, "name": name}


class KernelAccounting(unittest.TestCase):
    def test_overlapping_kernels_count_once_and_gaps_are_what_no_kernel_covers(self):
        # Two steps over 0..100 us: busy 0-30 (two overlapping kernels), 50-60 and 90-100; gaps 50%.
        trace = {"traceEvents": [kernel(0, 20, "gemm"), kernel(10, 20, "gemm"), kernel(50, 10, "softmax"),
                                 kernel(90, 10, "gemm"), {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 500, "name": "aten::mm"}]}
        figures = kernel_accounting.account(trace, steps=2, top=1)
        self.assertEqual(figures["kernels_per_step"], 2)
        self.assertAlmostEqual(figures["busy_ms_per_step"], 0.025)
        self.assertAlmostEqual(figures["span_ms_per_step"], 0.05)
        self.assertAlmostEqual(figures["gap_percent"], 50.0)
        self.assertEqual(figures["top"], [("gemm", 0.025)])
        self.assertTrue(kernel_accounting.table_row("packed", figures).startswith("| packed | 2 | 0.03 | 0.05 | 50.0 | gemm"))

    def test_a_trace_without_kernels_is_refused(self):
        with self.assertRaises(ValueError):
            kernel_accounting.account({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 5}]}, steps=1)


if __name__ == "__main__":
    unittest.main()
