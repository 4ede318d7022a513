"""The documentation names what exists, and the README's commands can run as written.

- Every path that README.md, jobs/README.md and docs/*.md name in `code` exists in the repository,
  and git does not ignore it (a result left out of the commit by .gitignore exists only here).
  A path is a word in backticks that starts with one of the repository's folders (src/, jobs/, ...)
  or, in jobs/README.md's inline code, a script or job file of jobs/ named alone (`submit.sh`).
  Fenced blocks count too (a listing of run outputs there names no job file). Left out: what a
  build, an install or a run makes (build/, .venv/, bench/.venv-hf, results/main/, results/sample,
  results/container-main, run folders) and templates with capitalized placeholders (jobs/JOB.sbatch, RUN/results.json).
- Every relative Markdown link of those files points at a file that exists, and its #anchor at one
  of that file's headings (GitHub's anchors).
- Every file that a comment of the sources names exists in the repository (committed, or untracked
  and not ignored). The comments are those of src/, include/, tests/ and scripts/: C++ `//` and
  `/* */`, Python `#` and docstrings, shell and CMake `#`. A name is a word ending in a source
  extension (.cpp, .hpp, .py, .sh, ..., with or without folders), found when a file of the repository is
  that path or ends with it, or a word starting with one of the repository's folders, which must be
  that path. Left out: what runs make and placeholders (as above), and the files of other projects
  that comments cite (OTHER_PROJECTS: HF's run_qa.py, CUDA's headers, TensorBoard's protos).
- The README's ```bash blocks: a script run as `bash X` exists; a program invoked directly (the
  first word of a command, after `$(`, `&&`, `|`, `;`, or the program `mpirun`/`srun` starts) exists
  and is executable (under build/bin/ only once built: skipped with a message otherwise); and
  every option of the README's `build/bin/mpibert train` commands is one that
  `build/bin/mpibert train --help` lists (skipped with a message when build/bin/mpibert is not built).
"""
import ast
import io
import os
import pathlib
import re
import subprocess
import sys
import tokenize
import unittest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ["README.md", "jobs/README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
FOLDERS = ("src/", "include/", "scripts/", "jobs/", "tests/", "bench/", "configs/", "data_prep/", "results/", ".ci/",
           "docs/", "tools/", "cmake/")
MADE_BY_RUNS = ("build/", ".venv", "bench/.venv-hf", "results/main/", "results/sample", "results/comparison",
                "results/container-main", "data_prep/downloads/")
PLACEHOLDER = re.compile(r"(^|[/-])[A-Z][A-Z_]+([/.-]|$)")  # JOB, RUN, STRATEGY, NRANKSr...
JOB_FILE = re.compile(r"^[\w.-]+\.(sh|sbatch|toml|env)$")
LAUNCHERS = ("mpirun", "mpiexec", "srun")
SOURCE_FOLDERS = ("src", "include", "tests", "scripts")
SOURCE_NAME = re.compile(r"(?<![\w./$-])((?:[\w.-]+/)*[\w-]+\.(?:cpp|hpp|h|cc|py|sh|proto|cmake|sbatch))(?![\w/])")
# Files of other projects that comments cite (HF's examples and library, CUDA, NCCL, fmt, spdlog,
# TensorBoard, LibTorch's CMake package): not the repository's.
OTHER_PROJECTS = {"run_qa.py", "utils_qa.py", "optimization.py", "transformers/optimization.py", "cuda_runtime.h",
                  "cuda_runtime_api.h", "crt/host_config.h", "cuda_fp16.h", "nccl.h", "fmt/fmt.h", "tweakme.h",
                  "TorchConfig.cmake", "event.proto", "summary.proto", "tensor.proto", "struct.proto",
                  "plugins/hparams/plugin_data.proto"}
MPIBERT = "build/bin/mpibert"


def skip_notice(message):
    """A skip that shows in ctest's output too (unittest prints skip reasons only with -v)."""
    print(f"test_doc_paths: SKIPPED: {message}", file=sys.stderr)


def named_paths(doc, text=None):
    """Paths in `code` and in fenced blocks (which the backtick pattern sees as one span each)."""
    text = (ROOT / doc).read_text(encoding="utf-8") if text is None else text
    for fenced, inline in re.findall(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", text, re.S):
        for word in (fenced or inline).split():
            word = word.strip("\"'(),;:")
            template = PLACEHOLDER.search(word.replace("README", "readme"))
            if word.startswith(FOLDERS) and not word.startswith(MADE_BY_RUNS) and not template:
                yield word
            elif doc.startswith("jobs/") and inline and JOB_FILE.match(word):
                yield "jobs/" + word


def heading_anchor(heading):
    """GitHub's anchor for a heading: lower case, no punctuation but - and _, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {heading_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def links(doc, text=None):
    """(target file, anchor or None) of every relative Markdown link, outside code."""
    text = (ROOT / doc).read_text(encoding="utf-8") if text is None else text
    text = re.sub(r"```.*?```|`[^`\n]+`", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        path = (ROOT / doc).parent / file if file else ROOT / doc
        yield path.resolve(), anchor or None, target


def bash_commands(text):
    """The commands of ```bash blocks: continuation lines joined, comments dropped, split at ; && || | $(."""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        block = re.sub(r"\\\n", " ", block)
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)
            for command in re.split(r";|&&|\|\||\||\$\(|\)", line):
                words = command.split()
                if words:
                    yield words


def invoked(words):
    """('bash', script) or ('direct', program) for a command's words; None for anything else."""
    words = [w for w in words if not re.match(r"^\w+=", w)] if words and re.match(r"^\w+=", words[0]) else words
    if not words or words[0] in ("for", "do", "done", "mkdir", "curl", "echo", "cd", "export", "source"):
        return None
    if words[0] == "bash":
        return ("bash", words[1]) if len(words) > 1 else None
    if words[0] in LAUNCHERS:  # the program is the first word that names a file of the repository
        for word in words[1:]:
            if word.startswith(FOLDERS + ("build/",)):
                return ("direct", word)
        return None
    if words[0].startswith(FOLDERS + ("build/",)):
        return ("direct", words[0])
    return None


def train_options(text):
    """Options given to `build/bin/mpibert train` in the README's ```bash blocks."""
    options = set()
    for words in bash_commands(text):
        for i, word in enumerate(words[:-1]):
            if word == MPIBERT and words[i + 1] == "train":
                options.update(w.split("=")[0] for w in words[i + 2:] if w.startswith("--"))
    return options


def ignored_by_git(paths):
    """The paths git ignores (untracked and matching .gitignore): present here, absent from a clone."""
    if not (ROOT / ".git").exists():
        skip_notice("not a git checkout: whether the named paths are committed is not checked")
        return []
    found = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--stdin"], input="\n".join(paths),
                           capture_output=True, text=True)
    if found.returncode not in (0, 1):  # 1: none ignored
        raise RuntimeError(f"git check-ignore failed: {found.stderr}")
    return sorted(found.stdout.split())


def repository_files():
    """The repository's files as a clone would have them: tracked, or untracked and not ignored."""
    if not (ROOT / ".git").exists():
        skip_notice("not a git checkout: the repository's files are those on disk, build outputs left out")
        files = []
        for folder, subfolders, names in os.walk(ROOT):
            subfolders[:] = [d for d in subfolders if not d.startswith(("build", ".venv", ".git", "__pycache__"))]
            files += [str((pathlib.Path(folder) / n).relative_to(ROOT)) for n in names]
        return sorted(files)
    found = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True)
    return sorted(f for f in found.stdout.splitlines() if (ROOT / f).is_file())


def comments(path, text):
    """(line, text) of each comment of a source file (docstrings count as Python's comments)."""
    if path.endswith((".cpp", ".hpp", ".h", ".cc", ".proto")):
        for number, line in enumerate(text.splitlines(), 1):
            found = re.search(r"(?<![:\"\\])//(.*)$", line)
            if found:
                yield number, found.group(1)
        for found in re.finditer(r"/\*(.*?)\*/", text, re.S):
            yield text.count("\n", 0, found.start()) + 1, found.group(1)
    elif path.endswith(".py"):
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type == tokenize.COMMENT:
                    yield token.start[0], token.string
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
                    yield getattr(node, "lineno", 1), ast.get_docstring(node)
        except (SyntaxError, tokenize.TokenError):
            return
    elif path.endswith((".sh", ".cmake", ".sbatch")) or path.endswith("CMakeLists.txt"):
        for number, line in enumerate(text.splitlines(), 1):
            found = re.search(r"(?:^|\s)#(?!!)(.*)$", line)
            if found:
                yield number, found.group(1)


def names_in_comment(comment):
    """The files a comment names: words with a source extension, and words that start with a folder."""
    names = {re.sub(r"^(\.\.?/)+", "", name) for name in SOURCE_NAME.findall(comment)}
    for word in comment.split():
        word = re.sub(r"'s$", "", word.strip("\"'(),;:`[].")).strip("\"'(),;:`[].")
        if (word + "/").startswith(FOLDERS) and not re.search(r"[*?{}<>$]", word):
            names.add(word.rstrip("/"))
    return {n for n in names if not (n + "/").startswith(MADE_BY_RUNS)
            and not PLACEHOLDER.search(n.replace("README", "readme")) and n not in OTHER_PROJECTS}


def stale_pointers(files, read=lambda f: (ROOT / f).read_text(encoding="utf-8")):
    """'FILE:LINE: NAME' for each name a source comment gives that no file of `files` is or ends with."""
    present = set(files) | {d for f in files for d in (str(p) for p in pathlib.PurePath(f).parents)}
    suffixes = {f.split("/", i)[-1] for f in files for i in range(f.count("/") + 1)}
    stale = []
    for path in files:
        if not path.startswith(tuple(folder + "/" for folder in SOURCE_FOLDERS)):
            continue
        try:
            text = read(path)
        except (UnicodeDecodeError, OSError):
            continue  # binary fixtures
        for number, comment in comments(path, text):
            for name in sorted(names_in_comment(comment)):
                if (name + "/").startswith(FOLDERS):
                    if name not in present and name + ".md" not in present:  # "jobs/README's" for its README.md
                        stale.append(f"{path}:{number}: {name}")
                elif name not in suffixes:
                    stale.append(f"{path}:{number}: {name}")
    return sorted(stale)


class SourceComments(unittest.TestCase):
    def test_every_file_a_comment_names_exists(self):
        files = repository_files()
        self.assertGreater(len(files), 100, "the repository's files were not found")
        self.assertEqual(stale_pointers(files), [], "source comments name files that do not exist")

    def test_the_pattern_finds_names_and_leaves_out_others(self):
        sources = {
            "src/a/real.cpp": "// see model/real.hpp and real.cpp; HF's run_qa.py; RUN/results.json, build/bin/x\n"
                              "int x = 1;  // gone.hpp, src/a/gone.cpp (tests/*.cpp)\nstd::string u = \"http://x.y/z.py\";\n",
            "include/model/real.hpp": "/* the reader\n  (old_name.hpp) */\n#include \"nowhere.hpp\"\n",
            "scripts/s.sh": "echo ${#list[@]}  # runs scripts/missing.sh, then \"$dir/env.sh\"\n",
            "tests/t.py": '"""Writes fixture.py\'s files."""\nx = "# not.py"  # but old.py\n',
        }
        self.assertEqual(stale_pointers(sorted(sources), read=sources.get),
                         ["include/model/real.hpp:1: old_name.hpp", "scripts/s.sh:1: scripts/missing.sh",
                          "src/a/real.cpp:2: gone.hpp", "src/a/real.cpp:2: src/a/gone.cpp", "tests/t.py:1: fixture.py",
                          "tests/t.py:2: old.py"])


class DocumentedPaths(unittest.TestCase):
    def test_every_named_path_exists(self):
        missing, named_here = [], []
        for doc in DOCS:
            paths = sorted(set(named_paths(doc)))
            self.assertGreater(len(paths), 3, f"{doc}: the pattern found almost no paths")
            for path in paths:
                if (ROOT / path).exists():
                    named_here.append(path)
                else:
                    missing.append(f"{doc}: {path}")
        self.assertEqual(missing, [], "paths named that do not exist")
        self.assertEqual(ignored_by_git(named_here), [], "paths named that exist here but a clone would not have")

    def test_links_point_at_files_and_headings(self):
        broken, linked_here = [], []
        for doc in DOCS:
            for path, anchor, target in links(doc):
                if not path.exists():
                    broken.append(f"{doc}: {target} (no such file)")
                    continue
                if path.is_relative_to(ROOT):
                    linked_here.append(str(path.relative_to(ROOT)))
                if anchor and path.suffix == ".md" and anchor not in anchors(path):
                    broken.append(f"{doc}: {target} (no such heading)")
        self.assertEqual(broken, [])
        self.assertEqual(ignored_by_git(linked_here), [], "links to files that a clone would not have")

    def test_the_pattern_finds_paths_and_leaves_out_outputs(self):
        text = ("Run `bash scripts/no_such.sh` then `results/compare RUN/results.json` (`tools/README.md`).\n"
                "```bash\njobs/submit.sh ddp -- --out build/bin/x\nlib.sh\n```\n`submit.sh` and `lib.sh`\n")
        self.assertEqual(sorted(named_paths("README.md", text)),
                         ["jobs/submit.sh", "results/compare", "scripts/no_such.sh", "tools/README.md"])
        self.assertEqual(sorted(named_paths("jobs/README.md", text)),
                         ["jobs/lib.sh", "jobs/submit.sh", "jobs/submit.sh", "results/compare", "scripts/no_such.sh",
                          "tools/README.md"])

    def test_the_command_parser(self):
        text = ("```bash\nbash scripts/a.sh && bash scripts/b.sh x   # bash scripts/comment.sh\n"
                "prep=$(jobs/submit.sh prep -- a b)\nmkdir -p models\n"
                "mpirun -n 2 --bind-to none build/bin/mpibert train \\\n  --seed 42 --bf16=true\n"
                "echo hi | build/bin/mpibert tokenize --vocab v\n```\n```text\nbash scripts/output.sh\n```\n")
        found = [invoked(words) for words in bash_commands(text)]
        self.assertEqual([f for f in found if f],
                         [("bash", "scripts/a.sh"), ("bash", "scripts/b.sh"), ("direct", "jobs/submit.sh"),
                          ("direct", MPIBERT), ("direct", MPIBERT)])
        self.assertEqual(train_options(text), {"--seed", "--bf16"})
        self.assertEqual(heading_anchor("`mpibert score`: the official SQuAD scorers"),
                         "mpibert-score-the-official-squad-scorers")
        self.assertEqual(heading_anchor("Pretrained MiniLM: mpibert beside HF's Trainer"),
                         "pretrained-minilm-mpibert-beside-hfs-trainer")


class ReadmeCommands(unittest.TestCase):
    text = (ROOT / "README.md").read_text(encoding="utf-8")

    def test_scripts_and_programs_exist_and_run(self):
        problems, unbuilt = [], set()
        for kind, path in filter(None, map(invoked, bash_commands(self.text))):
            file = ROOT / path
            if path.startswith("build/") and not file.exists():
                unbuilt.add(path)
            elif not file.is_file():
                problems.append(f"{path}: no such file")
            elif kind == "direct" and not os.access(file, os.X_OK):
                problems.append(f"{path}: invoked directly but not executable")
        if unbuilt:
            skip_notice(f"README programs not built, not checked: {', '.join(sorted(unbuilt))}")
        self.assertEqual(problems, [], "README.md's commands name scripts or programs that cannot run")

    def test_the_train_command_uses_options_mpibert_has(self):
        options = train_options(self.text)
        self.assertIn("--output-dir", options, "README.md has no `build/bin/mpibert train` command line")
        binary = ROOT / MPIBERT
        if not os.access(binary, os.X_OK):
            skip_notice(f"{MPIBERT} is not built: the README's `mpibert train` options were not checked")
            self.skipTest(f"{MPIBERT} is not built")
        help_text = subprocess.run([str(binary), "train", "--help"], capture_output=True, text=True, timeout=60,
                                   cwd=ROOT).stdout
        known = set(re.findall(r"--[a-z][\w-]*", help_text))
        self.assertGreater(len(known), 20, f"`{MPIBERT} train --help` listed almost no options")
        self.assertEqual(sorted(options - known), [], "README.md's `mpibert train` options that mpibert does not have")


if __name__ == "__main__":
    unittest.main()
