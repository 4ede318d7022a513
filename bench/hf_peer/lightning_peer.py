"""Lightning's side: BertForQuestionAnswering fine-tuned by a LightningModule under Lightning's
Trainer, logged as Lightning users log it (CSVLogger: metrics.csv + hparams.yaml; ThroughputMonitor).

    lightning_peer.py train --train-file SQUAD --eval-file SQUAD --model DIR --output-dir DIR
                            --max-steps N [--batch 32] [--learning-rate 1e-4] [--warmup-ratio 0]
                            [--weight-decay 0] [--seed 42] [--threads T] [--val-check-interval N]

The features, post-processing and scores are run_qa_peer.py's (run_qa.py's semantics). The module
logs train_loss every step, and per validation val_loss (the evaluation features carry labels:
they are the same windows as run_qa's validation features), val_exact_match and val_f1.
ThroughputMonitor logs train/time, train/samples and their rates. AdamW (HF Trainer's grouping:
no decay on biases and LayerNorm weights) with transformers' linear warmup schedule, clipped at
1.0. Writes OUTPUT_DIR/lightning_logs/version_N/.
"""

import argparse
import os
import sys

import lightning as L
import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers import CSVLogger
from transformers import BertForQuestionAnswering, get_linear_schedule_with_warmup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_qa_peer import (LABELS, MODEL_INPUTS, Features, load_squad, make_collator, make_tokenizer,  # noqa: E402
                         postprocess_predictions, prepare_train_features, prepare_validation_features,
                         squad_v1_scores)


class QuestionAnswering(L.LightningModule):
    def __init__(self, model_dir, learning_rate, weight_decay, warmup_ratio, max_steps, batch_size,
                 accelerator="cpu", devices=1, num_nodes=1, strategy="auto", accumulate_grad_batches=1, seed=42):
        super().__init__()
        self.save_hyperparameters()  # hparams.yaml: what a reader of the log needs to know of the run
        self.model = BertForQuestionAnswering.from_pretrained(model_dir)
        self.model.train()  # from_pretrained leaves it in eval mode (dropout off), and fit() keeps that
        self.eval_examples = self.eval_features = None
        self.start_logits, self.end_logits = [], []

    def training_step(self, batch, batch_index):
        loss = self.model(**batch).loss
        self.log("train_loss", loss, on_step=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_index):
        output = self.model(**batch)
        self.log("val_loss", output.loss, on_epoch=True, batch_size=batch["input_ids"].size(0))
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        for row, length in enumerate(lengths):
            self.start_logits.append(output.start_logits[row, :length].float().cpu().numpy())
            self.end_logits.append(output.end_logits[row, :length].float().cpu().numpy())

    def on_validation_epoch_end(self):
        predictions = postprocess_predictions(self.eval_examples, self.eval_features, self.start_logits, self.end_logits)
        em, f1 = squad_v1_scores(self.eval_examples, predictions)
        self.log("val_exact_match", em)
        self.log("val_f1", f1)
        self.start_logits, self.end_logits = [], []

    def configure_optimizers(self):
        hp = self.hparams
        no_decay = [n for n, _ in self.model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
        groups = [{"params": [p for n, p in self.model.named_parameters() if n not in no_decay], "weight_decay": hp.weight_decay},
                  {"params": [p for n, p in self.model.named_parameters() if n in no_decay], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=hp.learning_rate)
        schedule = get_linear_schedule_with_warmup(optimizer, int(hp.warmup_ratio * hp.max_steps + 0.999999), hp.max_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class ValidationFeatures(torch.utils.data.Dataset):
    """run_qa's validation windows with their labels, so that validation also gives a loss."""

    def __init__(self, labelled):
        self.items = [{k: f[k] for k in MODEL_INPUTS + LABELS} for f in labelled]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def cmd_train(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    L.seed_everything(args.seed, workers=True)
    tokenizer = make_tokenizer(args.vocab or os.path.join(args.model, "vocab.txt"))
    train = prepare_train_features(tokenizer, load_squad(args.train_file), args.max_seq_length, args.doc_stride, False)
    eval_examples = load_squad(args.eval_file)
    eval_features = prepare_validation_features(tokenizer, eval_examples, args.max_seq_length, args.doc_stride, False)
    eval_labelled = prepare_train_features(tokenizer, eval_examples, args.max_seq_length, args.doc_stride, False)
    assert len(eval_labelled) == len(eval_features), "validation and labelled windows differ"
    collate = make_collator(tokenizer, "dynamic")
    train_loader = torch.utils.data.DataLoader(Features(train, MODEL_INPUTS + LABELS), batch_size=args.batch,
                                               shuffle=True, collate_fn=collate)
    eval_loader = torch.utils.data.DataLoader(ValidationFeatures(eval_labelled), batch_size=64, collate_fn=collate)

    module = QuestionAnswering(args.model, args.learning_rate, args.weight_decay, args.warmup_ratio, args.max_steps,
                               args.batch, seed=args.seed)
    module.eval_examples, module.eval_features = eval_examples, eval_features
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=args.max_steps, gradient_clip_val=1.0,
                        val_check_interval=args.val_check_interval, check_val_every_n_epoch=None,
                        log_every_n_steps=1, num_sanity_val_steps=0, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        logger=CSVLogger(args.output_dir, name="lightning_logs"),
                        callbacks=[ThroughputMonitor(batch_size_fn=lambda batch: batch["input_ids"].size(0))])
    trainer.fit(module, train_loader, eval_loader)
    print("lightning peer: log in %s" % trainer.logger.log_dir)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="fine-tune and validate under Lightning's Trainer with its CSV logger")
    p.add_argument("--train-file", required=True)
    p.add_argument("--eval-file", required=True)
    p.add_argument("--model", required=True, help="HF model directory")
    p.add_argument("--vocab", help="vocab.txt (default: the model's)")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--val-check-interval", type=int, default=None, help="validate every N steps (default: per epoch)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--warmup-ratio", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-seq-length", type=int, default=384)
    p.add_argument("--doc-stride", type=int, default=128)
    p.add_argument("--threads", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    {"train": cmd_train}[args.command](args)
