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
        self.assertIn('src/core/error.cpp: layer core includes "mpibert/train/trainer.hpp"', result.stdout)

    def test_a_sibling_that_is_not_listed_fails(self):
        root = self.make_tree({
            "include/mpibert/data/shards.hpp": "",
            "include/mpibert/model/bert_qa.hpp": '#include "mpibert/data/shards.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('layer model includes "mpibert/data/shards.hpp"', result.stdout)

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

    def test_a_relative_include_into_another_layer_fails(self):
        root = self.make_tree({
            "src/train/trainer_impl.hpp": "",
            "src/parallel/fsdp.cpp": '#include "../train/trainer_impl.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('src/parallel/fsdp.cpp: layer parallel includes "../train/trainer_impl.hpp" '
                      '(src/train/trainer_impl.hpp, layer train)', result.stdout)

    def test_an_angle_bracket_include_of_a_project_header_is_checked(self):
        root = self.make_tree({
            "include/mpibert/train/trainer.hpp": "",
            "src/parallel/ddp.cpp": "#include <mpibert/train/trainer.hpp>\n#include <vector>\n",
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("src/parallel/ddp.cpp: layer parallel includes <mpibert/train/trainer.hpp>", result.stdout)

    def test_private_headers_that_include_each_other_fail(self):
        root = self.make_tree({
            "src/parallel/gradient_reducer.hpp": '#include "unit_gatherer.hpp"\n',
            "src/parallel/unit_gatherer.hpp": '#include "gradient_reducer.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("modules include each other: parallel/gradient_reducer -> parallel/unit_gatherer -> "
                      "parallel/gradient_reducer", result.stdout)

    def test_a_private_header_of_another_layer_fails_even_downward(self):
        root = self.make_tree({
            "src/comm/in_flight.hpp": "",
            "src/parallel/ddp.cpp": '#include "../comm/in_flight.hpp"\n',
        })
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn("a private header of layer comm (src/comm/in_flight.hpp)", result.stdout)

    def test_a_quoted_include_of_no_file_fails(self):
        root = self.make_tree({"src/parallel/ddp.cpp": '#include "gone.hpp"\n#include "tensorboard_event.pb.h"\n'})
        result = run(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('includes "gone.hpp", which is no file beside it or under include/', result.stdout)
        self.assertNotIn("tensorboard_event.pb.h", result.stdout)


class LayoutDoc(unittest.TestCase):
    """docs/layout.md's table of layers is check_layers.py's, and every folder of src/ is in it."""

    def test_the_table_is_the_checks_and_names_every_folder(self):
        sys.path.insert(0, str(ROOT / "scripts"))
        import check_layers
        rows = {}
        for line in (ROOT / "docs" / "layout.md").read_text(encoding="utf-8").splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("`"):
                rows[cells[0].strip("`")] = [] if cells[2] in ("—", "") else [c.strip() for c in cells[2].split(",")]
        self.assertEqual(list(rows), list(check_layers.LAYERS), "docs/layout.md's layers, in order")
        for layer, below in check_layers.LAYERS.items():
            self.assertEqual(sorted(rows[layer]), sorted(below), f"docs/layout.md: what {layer} may include")
        folders = sorted(p.name for p in (ROOT / "src").iterdir() if p.is_dir())
        self.assertEqual(sorted(set(folders) - set(rows)), [], "src/ folders docs/layout.md does not describe")


if __name__ == "__main__":
    unittest.main()
