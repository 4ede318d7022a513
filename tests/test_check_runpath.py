"""scripts/check_runpath.py's rule, on made-up folders: the CUDA libraries a program needs load from
the LibTorch wheel's folders, and no folder of its RUNPATH offers another CUDA runtime."""
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
from check_runpath import runpath_problems  # noqa: E402

WHEEL = "/venv/lib/python3.11/site-packages"
NEEDED = ["libtorch.so", "libtorch_cuda.so", "libcudart.so.13", "libnccl.so.2", "libmpi.so.40", "libc.so.6"]


def folders_of(files):
    return lambda folder: files.get(folder, [])


class RunpathRule(unittest.TestCase):
    def test_the_wheels_libraries_first_pass(self):
        files = {"/usr/lib/openmpi": ["libmpi.so.40"], WHEEL + "/torch/lib": ["libtorch.so", "libtorch_cuda.so"],
                 WHEEL + "/nvidia/cu13/lib": ["libcudart.so.13"], WHEEL + "/nvidia/nccl/lib": ["libnccl.so.2"]}
        problems, found = runpath_problems(NEEDED, list(files), [WHEEL], folders_of(files))
        self.assertEqual(problems, [])
        self.assertEqual(len(found), 3)  # libtorch_cuda, libcudart, libnccl

    def test_a_toolkit_folder_ahead_of_the_wheel_is_named(self):
        files = {"/usr/local/cuda/lib64": ["libcudart.so.13"], WHEEL + "/torch/lib": ["libtorch.so", "libtorch_cuda.so"],
                 WHEEL + "/nvidia/cu13/lib": ["libcudart.so.13"], WHEEL + "/nvidia/nccl/lib": ["libnccl.so.2"]}
        problems, _ = runpath_problems(NEEDED, list(files), [WHEEL], folders_of(files))
        self.assertEqual(len(problems), 1)
        self.assertIn("libcudart.so.13 loads from /usr/local/cuda/lib64", problems[0])

    def test_another_runtime_major_in_the_runpath_is_named(self):
        files = {WHEEL + "/torch/lib": ["libtorch.so", "libtorch_cuda.so"], WHEEL + "/nvidia/cu13/lib": ["libcudart.so.13"],
                 WHEEL + "/nvidia/nccl/lib": ["libnccl.so.2"], "/opt/cuda-12.4/lib64": ["libcudart.so.12"]}
        problems, _ = runpath_problems(NEEDED, list(files), [WHEEL], folders_of(files))
        self.assertEqual(len(problems), 1)
        self.assertIn("libcudart.so.12 in /opt/cuda-12.4/lib64 is CUDA 12's runtime", problems[0])

    def test_a_cuda_library_in_no_folder_is_named(self):
        files = {WHEEL + "/torch/lib": ["libtorch.so", "libtorch_cuda.so"], WHEEL + "/nvidia/cu13/lib": ["libcudart.so.13"]}
        problems, _ = runpath_problems(NEEDED, list(files), [WHEEL], folders_of(files))
        self.assertEqual(len(problems), 1)
        self.assertIn("libnccl.so.2 is in no RUNPATH folder", problems[0])

    def test_a_cpu_program_has_nothing_to_check(self):
        problems, found = runpath_problems(["libtorch.so", "libc.so.6"], ["/x"], [WHEEL], folders_of({}))
        self.assertEqual((problems, found), ([], []))


if __name__ == "__main__":
    unittest.main()
