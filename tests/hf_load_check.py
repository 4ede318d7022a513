"""transformers loads the HF model directories mpibert saves, with nothing missing, unexpected or
mismatched, and gives mpibert's logits: each DIR holds mpibert's save_pretrained and
mpibert_outputs.safetensors (the batch and mpibert's start and end logits on it). Token types are
given where the family's tokenizer gives them (its config's type_vocab_size above 1 and not
RoBERTa's). Used by tests/test_encoder_families.cpp.

    python3 tests/hf_load_check.py DIR..."""
import sys

import torch
import transformers
from safetensors.torch import load_file

NO_TOKEN_TYPES = {"roberta", "xlm-roberta", "modernbert"}


def check(directory):
    model, info = transformers.AutoModelForQuestionAnswering.from_pretrained(
        directory, output_loading_info=True, attn_implementation="eager")
    problems = {k: v for k, v in info.items() if v}
    if problems:
        return f"{directory}: {problems}"
    model.eval()
    saved = load_file(f"{directory}/mpibert_outputs.safetensors")
    inputs = {"input_ids": saved["input_ids"], "attention_mask": saved["attention_mask"]}
    if model.config.model_type not in NO_TOKEN_TYPES:
        inputs["token_type_ids"] = saved["token_type_ids"]
    with torch.no_grad():
        out = model(**inputs)
    real = saved["attention_mask"].bool()
    diff = max((out.start_logits - saved["start_logits"])[real].abs().max().item(),
               (out.end_logits - saved["end_logits"])[real].abs().max().item())
    print(f"{model.config.model_type} ({type(model).__name__}): loaded with no missing, unexpected or mismatched keys; "
          f"logits max |diff| {diff:.3g}")
    return None if diff <= 1e-5 else f"{directory}: logits differ by {diff}"


def main():
    torch.set_num_threads(1)
    failures = [problem for problem in map(check, sys.argv[1:]) if problem]
    for failure in failures:
        print("FAIL:", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
