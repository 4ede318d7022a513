"""scripts/check_layers.py on this repository (no problem) and on small trees that break a rule."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_layers.py"


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


class CheckLayers(unittest.TestCase):
    def make_tree(self, files):
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        root = pathlib.Path(directory.name)
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root

    def test_this_repository_follows_its_layers(self):
        result = run(ROOT)
        self.assertEqual(result.returncode, 0, result.stdout)

    def test_an_upward_include_fails_and_is_named(self):
        root = self.make_tree({
            "include/mpibert/core/error.hpp": "",
            "include/mpibert/train/trainer.hpp": "",
            "src/core/error.cpp": '#include "mpibert/core/error.hpp"\n#include "mpibert/train/trainer.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/core/error.cpp: layer core includes mpibert/train/trainer.hpp", result.stdout)

    def test_a_sibling_that_is_not_listed_fails(self):
        root = self.make_tree({
            "include/mpibert/data/shards.hpp": "",
            "include/mpibert/model/bert_qa.hpp": '#include "mpibert/data/shards.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("layer model includes mpibert/data/shards.hpp", result.stdout)

    def test_files_outside_layers_and_missing_headers_fail(self):
        root = self.make_tree({
            "src/stray.cpp": "",
            "src/text/tokenizer.cpp": '#include "mpibert/core/gone.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/stray.cpp: not in a layer folder", result.stdout)
        self.assertIn('includes "mpibert/core/gone.hpp", which is not a header', result.stdout)

    def test_modules_that_include_each_other_fail(self):
        root = self.make_tree({
            "include/mpibert/runtime/peers.hpp": "",
            "include/mpibert/runtime/host_collectives.hpp": "",
            "src/runtime/peers.cpp": '#include "mpibert/runtime/peers.hpp"\n#include "mpibert/runtime/host_collectives.hpp"\n',
            "src/runtime/host_collectives.cpp": '#include "mpibert/runtime/host_collectives.hpp"\n#include "mpibert/runtime/peers.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("modules include each other: runtime/host_collectives -> runtime/peers -> runtime/host_collectives",
                      result.stdout)

    def test_a_module_may_include_its_own_header_and_lower_modules(self):
        root = self.make_tree({
            "include/mpibert/runtime/peers.hpp": "",
            "include/mpibert/runtime/host_collectives.hpp": "",
            "src/runtime/peers.cpp": '#include "mpibert/runtime/peers.hpp"\n#include "mpibert/runtime/host_collectives.hpp"\n',
            "src/runtime/host_collectives.cpp": '#include "mpibert/runtime/host_collectives.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 0, result.stdout)

    MODEL_HEADER = ("// A model of the model layer.\nstruct TinyConfig {};\n"
                    "class TinyQAImpl : public torch::nn::Module {};\nTORCH_MODULE(TinyQA);\n")

    def test_train_eval_and_cli_name_no_concrete_model(self):
        root = self.make_tree({
            "include/mpibert/nn/qa_model.hpp": "",
            "include/mpibert/model/tiny_qa.hpp": self.MODEL_HEADER,
            "include/mpibert/model/model_registry.hpp": '#include "mpibert/nn/qa_model.hpp"\n',
            "src/model/model_registry.cpp": '#include "mpibert/model/tiny_qa.hpp"\nTinyQA make(TinyConfig c);\n',
            "src/train/trainer.cpp": '#include "mpibert/model/model_registry.hpp"\n// TinyQA in a comment is fine\n'
                                     'void run(TinyQA& model);\n',
            "src/eval/scores.cpp": "TinyQAImpl* impl; TinyConfig config;\n",
            "src/cli/commands.cpp": '#include "mpibert/model/tiny_qa.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("src/train/trainer.cpp: names the concrete model(s) TinyQA "
                      "(declared in include/mpibert/model/tiny_qa.hpp)", result.stdout)
        self.assertIn("src/eval/scores.cpp: names the concrete model(s) TinyConfig, TinyQAImpl", result.stdout)
        self.assertIn('src/cli/commands.cpp: includes "mpibert/model/tiny_qa.hpp", which declares a concrete model',
                      result.stdout)
        self.assertNotIn("src/model/", result.stdout)  # the model layer names its own models
        self.assertIn("3 problem(s)", result.stdout)

    def test_the_interface_and_the_registry_are_what_train_may_use(self):
        root = self.make_tree({
            "include/mpibert/nn/qa_model.hpp": "class QuestionAnsweringModel {};\n",
            "include/mpibert/model/tiny_qa.hpp": self.MODEL_HEADER,
            "include/mpibert/model/model_registry.hpp": '#include "mpibert/nn/qa_model.hpp"\n',
            "src/train/trainer.cpp": '#include "mpibert/model/model_registry.hpp"\nvoid run(QuestionAnsweringModel& m);\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 0, result.stdout)


if __name__ == "__main__":
    unittest.main()
