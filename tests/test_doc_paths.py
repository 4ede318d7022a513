"""Every path that README.md and jobs/README.md name in `code` exists in the repository.

A path is a word in backticks that starts with one of the repository's folders (src/, jobs/, ...)
or, in jobs/README.md's inline code, a script or job file of jobs/ named alone (`submit.sh`). Fenced
blocks count too (a listing of run outputs there names no job file). Left out: what a
build, an install or a run makes (build/, .venv/, bench/.venv-hf, results/main/, run folders)
and templates with capitalized placeholders (jobs/JOB.sbatch, RUN/results.json).
"""
import pathlib
import re
import unittest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ["README.md", "jobs/README.md"]
FOLDERS = ("src/", "include/", "scripts/", "jobs/", "tests/", "bench/", "configs/", "data_prep/", "results/", "tools/", ".ci/")
MADE_BY_RUNS = ("build/", ".venv", "bench/.venv-hf", "results/main/", "data_prep/downloads/")
PLACEHOLDER = re.compile(r"(^|[/-])[A-Z][A-Z_]+([/.-]|$)")  # JOB, RUN, STRATEGY, NRANKSr...
JOB_FILE = re.compile(r"^[\w.-]+\.(sh|sbatch|toml|env)$")


def named_paths(doc, text=None):
    """Paths in `code` and in fenced blocks (which the backtick pattern sees as one span each)."""
    text = (ROOT / doc).read_text(encoding="utf-8") if text is None else text
    for fenced, inline in re.findall(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", text, re.S):
        for word in (fenced or inline).split():
            word = word.strip("\"'(),;:")
            if word.startswith(FOLDERS) and not word.startswith(MADE_BY_RUNS) and not PLACEHOLDER.search(word):
                yield word
            elif doc.startswith("jobs/") and inline and JOB_FILE.match(word):
                yield "jobs/" + word


class DocumentedPaths(unittest.TestCase):
    def test_every_named_path_exists(self):
        for doc in DOCS:
            paths = sorted(set(named_paths(doc)))
            self.assertGreater(len(paths), 10, f"{doc}: the pattern found almost no paths")
            missing = [path for path in paths if not (ROOT / path).exists()]
            self.assertEqual(missing, [], f"{doc} names paths that do not exist")

    def test_the_pattern_finds_paths_and_leaves_out_outputs(self):
        text = ("Run `bash scripts/no_such.sh` then `results/compare RUN/results.json`.\n"
                "```bash\njobs/submit.sh ddp -- --out build/bin/x\nlib.sh\n```\n`submit.sh` and `lib.sh`\n")
        self.assertEqual(sorted(named_paths("README.md", text)), ["jobs/submit.sh", "results/compare", "scripts/no_such.sh"])
        self.assertEqual(sorted(named_paths("jobs/README.md", text)),
                         ["jobs/lib.sh", "jobs/submit.sh", "jobs/submit.sh", "results/compare", "scripts/no_such.sh"])


if __name__ == "__main__":
    unittest.main()
