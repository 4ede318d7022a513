"""transformers' pipeline("question-answering") against `mpibert predict` on one mpibert run
directory: both load the directory as it is (config.json, model.safetensors, vocab.txt,
tokenizer_config.json) and answer the same SQuAD questions; every answer must be the same text.

    PYTHON tests/hf_pipeline_answers.py RUN_DIR --mpibert build/bin/mpibert --squad DEV.json.gz
        [--articles 32:33] [--questions 20]

PYTHON: an interpreter with transformers, torch and tokenizers (bench/.venv-hf has them).
Questions whose context needs more than one 384-token feature are left out: across features the
pipeline compares softmax probabilities normalized per feature, run_qa's post-processing (which
mpibert follows) raw logits, so there the two may rightly differ. The pipeline is asked for
run_qa's rules otherwise: answers up to 30 tokens, no word alignment (token offsets, as run_qa),
no empty answer. Exits 1 naming every question answered differently."""
import argparse
import gzip
import json
import subprocess
import sys


def squad_questions(path, first, last, limit, fits):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        articles = json.load(f)["data"][first:last]
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if fits(qa["question"], paragraph["context"]):
                    yield qa["question"], paragraph["context"]
                    limit -= 1
                    if limit == 0:
                        return


def mpibert_answers(binary, run_dir, pairs):
    """`mpibert predict --questions -`: one process, each question answered as a lone --question is."""
    lines = "".join(json.dumps({"id": str(i), "question": q, "context": c}) + "\n" for i, (q, c) in enumerate(pairs))
    out = subprocess.run([binary, "predict", "--model", run_dir, "--questions", "-", "--device", "cpu",
                          "--log-level", "warn"], input=lines, check=True, capture_output=True, text=True)
    answers = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [a["id"] for a in answers] == [str(i) for i in range(len(pairs))], out.stdout
    return answers


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--mpibert", required=True)
    parser.add_argument("--squad", required=True)
    parser.add_argument("--articles", default="32:33")
    parser.add_argument("--questions", type=int, default=20)
    args = parser.parse_args()
    import transformers  # here, so that --help works without it

    qa = transformers.pipeline("question-answering", model=args.run_dir, tokenizer=args.run_dir, device=-1)
    model_type = qa.model.config.model_type
    fits = lambda question, context: len(qa.tokenizer(question, context)["input_ids"]) <= 384
    first, last = (int(x) for x in args.articles.split(":"))
    differing = compared = 0
    pairs = list(squad_questions(args.squad, first, last, args.questions, fits))
    for (question, context), mine in zip(pairs, mpibert_answers(args.mpibert, args.run_dir, pairs)):
        hf = qa(question=question, context=context, max_answer_len=30, align_to_words=False, top_k=1,
                handle_impossible_answer=False)
        same = hf["answer"] == mine["answer"]
        compared += 1
        differing += not same
        print(f"{'same' if same else 'DIFFERENT'}: {question!r}: HF {hf['answer']!r} "
              f"[{hf['start']}:{hf['end']}], mpibert {mine['answer']!r} [{mine['start']}:{mine['end']}]")
    print(f"{model_type} ({type(qa.model).__name__}, transformers {transformers.__version__}): "
          f"{compared - differing} of {compared} answers the same")
    sys.exit(1 if differing or compared == 0 else 0)


if __name__ == "__main__":
    main()
