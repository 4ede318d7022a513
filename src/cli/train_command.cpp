#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "mpibert/cli.hpp"
#include "mpibert/io.hpp"
#include "mpibert/logging.hpp"
#include "mpibert/trainer.hpp"

namespace mpibert {

struct TrainCommand::Impl {
  CLI::App* command = nullptr;
  TrainOptions options;
  std::string padding = "dynamic", log_level = "info";
  int threads = 0;
};

TrainCommand::TrainCommand(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  auto& o = impl_->options;
  CLI::App* c = impl_->command = app.add_subcommand("train", "fine-tune BERT for SQuAD on prepared shards");
  // CLI11 reads config files on the top-level app only: --config belongs to it, and falls through
  // from `train` so that `mpibert train --config FILE` works; the file's [train] section applies.
  app.set_config("--config", "", "read options from this file (TOML: options of `train` under [train])");
  c->fallthrough();
  c->add_option("--train-shards", o.train_dir, "directory prepared by mpibert-prep --split train")->required();
  c->add_option("--eval-shards", o.eval_dir, "directory prepared by mpibert-prep --split eval");
  c->add_option("--output-dir", o.output_dir, "run directory")->required();
  c->add_option("--model", o.model_dir, "HF model directory to start from (config.json + model.safetensors)");
  c->add_option("--model-config", o.model_config, "config.json for a randomly initialized model (without --model)");
  c->add_option("--vocab", o.vocab, "vocab.txt, copied into checkpoints")->required();
  c->add_option("--resume", o.resume, "auto (latest checkpoint in --output-dir) or a checkpoint directory");
  c->add_option("--epochs", o.epochs)->capture_default_str();
  c->add_option("--batch-size", o.batch_size, "per micro-batch")->capture_default_str();
  c->add_option("--gradient-accumulation", o.gradient_accumulation)->capture_default_str();
  c->add_option("--learning-rate", o.learning_rate)->capture_default_str();
  c->add_option("--weight-decay", o.weight_decay)->capture_default_str();
  c->add_option("--warmup-steps", o.warmup_steps)->capture_default_str();
  c->add_option("--warmup-ratio", o.warmup_ratio, "used when --warmup-steps is 0")->capture_default_str();
  c->add_option("--max-grad-norm", o.max_grad_norm)->capture_default_str();
  c->add_option("--seed", o.seed)->capture_default_str();
  c->add_option("--padding", impl_->padding, "dynamic (to the longest in the batch, multiple of 8) or full")
      ->check(CLI::IsMember({"dynamic", "full"}))
      ->capture_default_str();
  c->add_option("--stop-after-steps", o.stop_after_steps, "checkpoint and stop after this many steps (schedule unchanged)");
  c->add_option("--logging-steps", o.logging_steps)->capture_default_str();
  c->add_option("--save-steps", o.save_steps, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  c->add_option("--save-total-limit", o.save_total_limit, "checkpoints kept")->capture_default_str();
  c->add_option("--eval-batch-size", o.eval_batch_size)->capture_default_str();
  c->add_option("--n-best-size", o.postprocess.n_best_size)->capture_default_str();
  c->add_option("--max-answer-length", o.postprocess.max_answer_length)->capture_default_str();
  c->add_option("--null-score-diff-threshold", o.postprocess.null_score_diff_threshold)->capture_default_str();
  c->add_flag("--bf16", o.model.autocast_bf16, "bf16 autocast (GPU)");
  c->add_option("--threads", impl_->threads, "LibTorch threads (0: LibTorch's default)")->capture_default_str();
  c->add_option("--log-level", impl_->log_level)->capture_default_str();
}

TrainCommand::~TrainCommand() = default;

bool TrainCommand::parsed() const { return impl_->command->parsed(); }

int TrainCommand::run() {
  TrainOptions& options = impl_->options;
  init_logging(0, 1, impl_->log_level);
  if (options.model_dir.empty() == options.model_config.empty()) {
    spdlog::error("give exactly one of --model (an HF directory) and --model-config (random initialization)");
    return 2;
  }
  options.padding = impl_->padding == "full" ? Padding::kFull : Padding::kDynamic;
  if (impl_->threads > 0) torch::set_num_threads(impl_->threads);
  std::filesystem::create_directories(options.output_dir);
  write_file_atomic(options.output_dir + "/train_config.toml", "[train]\n" + impl_->command->config_to_str(true, true));
  nlohmann::ordered_json results = train(options);
  std::cout << "results: " << options.output_dir << "/results.json\n";
  for (const char* key : {"eval_exact_match", "eval_exact", "eval_f1"})
    if (results.contains(key)) std::cout << key << " = " << results[key].dump() << "\n";
  return 0;
}

}  // namespace mpibert
