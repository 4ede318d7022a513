#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/logging.hpp"
#include "mpibert/data/shard_building.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/runtime/peers.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/train/run_log.hpp"
#include "mpibert/train/trainer.hpp"

namespace mpibert {

struct ModelCommands::Impl {
  CLI::App *train = nullptr, *eval = nullptr, *predict = nullptr, *env = nullptr;
  TrainOptions options;
  std::string padding = "dynamic", log_level = "info", strategy = "ddp", embedding_exchange = "sparse";
  int threads = 0;
  double collective_timeout = 300;
  bool log_all_ranks = false;
  bool do_train = false, do_eval = false;  // run_qa.py switches, accepted
  // eval and predict
  std::string model_dir, data_dir, output_dir, context, question, device = "auto";
  int64_t batch_size = 64;
  PostprocessOptions postprocess;

  int run_train();
  int run_eval();
  int run_predict();
  void check_command_line();
};

ModelCommands::ModelCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  auto& o = impl_->options;
  CLI::App* c = impl_->train = app.add_subcommand("train", "fine-tune BERT for SQuAD on prepared shards");
  // CLI11 reads config files on the top-level app only: --config belongs to it, and falls through
  // from `train` so that `mpibert train --config FILE` works; the file's [train] section applies.
  app.set_config("--config", "", "read options from this file (TOML: options of `train` under [train])");
  c->fallthrough();
  c->add_option("--train-shards", o.train_dir, "directory prepared by mpibert-prep --split train")->required();
  c->add_option("--eval-shards", o.eval_dir, "directory prepared by mpibert-prep --split eval");
  c->add_option("--output-dir,--output_dir", o.output_dir, "run directory")->required();
  c->add_option("--model,--model_name_or_path", o.model_dir, "HF model directory to start from (config.json + model.safetensors), or a sentence-transformers one");
  c->add_option("--model-config", o.model_config, "config.json for a randomly initialized model (without --model)");
  c->add_option("--vocab", o.vocab, "vocab.txt, copied into checkpoints (default: the --model directory's)");
  c->add_option("--resume", o.resume, "auto (latest checkpoint in --output-dir) or a checkpoint directory");
  c->add_flag("--overwrite-output-dir,--overwrite_output_dir", o.overwrite_output_dir,
              "replace an earlier run in --output-dir (its checkpoints and records) instead of refusing to start");
  c->add_option("--max-seq-length,--max_seq_length", o.expected_max_seq_length,
                "refuse shards prepared with another max_seq_length (0: any; run_qa's is 384)")->capture_default_str();
  c->add_option("--doc-stride,--doc_stride", o.expected_doc_stride,
                "refuse shards prepared with another doc_stride (0: any; run_qa's is 128)")->capture_default_str();
  // run_qa.py's switches of what to run: training always runs, evaluation when --eval-shards is given.
  c->add_flag("--do_train", impl_->do_train, "accepted for run_qa.py command lines (training always runs)");
  c->add_flag("--do_eval", impl_->do_eval, "accepted for run_qa.py command lines: needs --eval-shards");
  c->add_option("--epochs,--num_train_epochs", o.epochs)->capture_default_str();
  c->add_option("--max-steps", o.max_steps, "train this many optimizer steps instead (overrides --epochs)")->capture_default_str();
  c->add_option("--batch-size,--per_device_train_batch_size", o.batch_size, "per rank, per micro-batch")->capture_default_str();
  c->add_option("--gradient-accumulation,--gradient_accumulation_steps", o.gradient_accumulation)->capture_default_str();
  c->add_option("--learning-rate,--learning_rate", o.learning_rate)->capture_default_str();
  c->add_option("--weight-decay,--weight_decay", o.weight_decay)->capture_default_str();
  c->add_option("--warmup-steps", o.warmup_steps)->capture_default_str();
  c->add_option("--warmup-ratio,--warmup_ratio", o.warmup_ratio, "used when --warmup-steps is 0")->capture_default_str();
  c->add_option("--max-grad-norm", o.max_grad_norm)->capture_default_str();
  c->add_option("--optim", o.optim,
                "as HF's --optim: adamw_torch_fused (torch's fused kernel, one pass per tensor: HF's default with "
                "torch >= 2.8) or adamw_torch (torch's AdamW op for op, HF's default before; the same update within "
                "round-off)")
      ->check(CLI::IsMember({"adamw_torch", "adamw_torch_fused"}))
      ->capture_default_str();
  c->add_option("--seed", o.seed)->capture_default_str();
  c->add_option("--padding", impl_->padding,
                "dynamic (to the longest in the batch, multiple of 8), full, or packed (no padding: the batch's features end "
                "to end, attention within each)")
      ->check(CLI::IsMember({"dynamic", "full", "packed"}))
      ->capture_default_str();
  c->add_flag("--group-by-length", o.group_by_length, "batches of similar length (HF's group_by_length): less padding");
  c->add_option("--stop-after-steps", o.stop_after_steps, "checkpoint and stop after this many steps (schedule unchanged)");
  c->add_option("--logging-steps,--logging_steps", o.logging_steps)->capture_default_str();
  c->add_option("--save-steps,--save_steps", o.save_steps, "checkpoint every N steps (0: only at the end)")->capture_default_str();
  c->add_option("--save-total-limit", o.save_total_limit, "checkpoints kept")->capture_default_str();
  c->add_option("--eval-batch-size,--per_device_eval_batch_size", o.eval_batch_size)->capture_default_str();
  c->add_option("--eval-steps", o.eval_steps, "also evaluate every N steps; the best F1 is kept in trainer_state.json")
      ->capture_default_str();
  c->add_option("--n-best-size", o.postprocess.n_best_size)->capture_default_str();
  c->add_option("--max-answer-length", o.postprocess.max_answer_length)->capture_default_str();
  c->add_option("--null-score-diff-threshold", o.postprocess.null_score_diff_threshold)->capture_default_str();
  c->add_option("--device", o.device, "auto (each rank its node-local GPU when there is one), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  c->add_option("--comm", o.comm, "with several ranks: auto (NCCL on GPUs, else MPI), mpi or nccl")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}))
      ->capture_default_str();
  c->add_option("--mpi-collectives", o.mpi_collectives,
                "the MPI backend's algorithm: ring (mpibert's ring for buffers from 256 KiB, the bandwidth optimum) or "
                "openmpi (Open MPI's tuned choice)")
      ->check(CLI::IsMember({"ring", "openmpi"}))
      ->capture_default_str();
  c->add_flag("--bf16", o.model.autocast_bf16, "bf16 autocast, float32 master weights");
  c->add_flag("--tf32", o.tf32, "TF32 for float32 matrix products on GPUs");
  c->add_flag("--profile", o.profile, "Chrome trace (Perfetto) of a window of steps in OUTPUT/profile/trace.json");
  c->add_option("--profile-wait", o.profile_schedule.wait, "steps before the profiler starts")->capture_default_str();
  c->add_option("--profile-warmup", o.profile_schedule.warmup, "steps it runs without recording")->capture_default_str();
  c->add_option("--profile-active", o.profile_schedule.active, "steps it records")->capture_default_str();
  c->add_option("--strategy", impl_->strategy,
                "with several ranks: ddp (all-reduce), zero1 (optimizer state sharded), zero2 (and gradients), "
                "fsdp (and parameters: ZeRO-3, FSDP FULL_SHARD)")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "fsdp"}))
      ->capture_default_str();
  c->add_option("--bucket-mb", o.parallel.bucket_mb, "gradient bucket size in MiB (DDP's bucket_cap_mb)")->capture_default_str();
  c->add_option("--embedding-exchange", impl_->embedding_exchange,
                "ddp: sparse (only the word-embedding rows a step touched are all-reduced; dense when their union "
                "passes 90% of the vocabulary) or dense (the whole embedding, as DDP)")
      ->check(CLI::IsMember({"sparse", "dense"}))
      ->capture_default_str();
  c->add_option("--collective-timeout", impl_->collective_timeout,
                "seconds a rank waits in a collective before it reports what it waited for and ends the job (0: forever)")
      ->capture_default_str();
  c->add_option("--threads", impl_->threads, "LibTorch threads per rank (0: LibTorch's default)")->capture_default_str();
  c->add_option("--log-level", impl_->log_level)->capture_default_str();
  c->add_flag("--log-all-ranks", impl_->log_all_ranks, "log info lines from every rank, not only rank 0");

  for (CLI::App* command : {impl_->eval = app.add_subcommand("eval", "evaluate an HF model directory on prepared shards"),
                            impl_->predict = app.add_subcommand("predict", "answer one question about one context")}) {
    command->add_option("--model", impl_->model_dir, "HF model directory (config.json, model.safetensors, vocab.txt)")->required();
    command->add_option("--n-best-size", impl_->postprocess.n_best_size)->capture_default_str();
    command->add_option("--max-answer-length", impl_->postprocess.max_answer_length)->capture_default_str();
    command->add_option("--threads", impl_->threads, "LibTorch threads (0: LibTorch's default)")->capture_default_str();
    command->add_option("--device", impl_->device, "auto (a GPU when there is one), cpu or cuda")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
        ->capture_default_str();
  }
  impl_->env = app.add_subcommand("env", "print the device this process would train on and the library versions (JSON)");
  impl_->env->add_option("--device", impl_->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  impl_->eval->add_option("--data", impl_->data_dir, "shards prepared with mpibert-prep --split eval")->required();
  impl_->eval->add_option("--output-dir", impl_->output_dir, "where predictions and metrics go")->required();
  impl_->eval->add_option("--batch-size", impl_->batch_size)->capture_default_str();
  impl_->eval->add_option("--padding", impl_->padding, "dynamic or packed (the same predictions; packed has no padding in its loss)")
      ->check(CLI::IsMember({"dynamic", "packed"}))
      ->capture_default_str();
  impl_->eval->add_option("--null-score-diff-threshold", impl_->postprocess.null_score_diff_threshold)->capture_default_str();
  impl_->predict->add_option("--context", impl_->context)->required();
  impl_->predict->add_option("--question", impl_->question)->required();
  impl_->predict->add_flag("--allow-no-answer", impl_->postprocess.version_2_with_negative, "SQuAD v2: the answer may be \"\"");
}

ModelCommands::~ModelCommands() = default;

bool ModelCommands::parsed() const {
  return impl_->train->parsed() || impl_->eval->parsed() || impl_->predict->parsed() || impl_->env->parsed();
}

int ModelCommands::run() {
  if (impl_->threads > 0) torch::set_num_threads(impl_->threads);
  if (impl_->env->parsed()) {
    std::cout << run_environment(1, "none", select_device(impl_->device, local_rank())).dump(2) << "\n";
    return 0;
  }
  if (impl_->predict->parsed()) {
    init_logging(0, 1, impl_->log_level);
    return impl_->run_predict();
  }
  // train and eval run on every rank of an mpirun/srun job (or as one process).
  MpiSession mpi(nullptr, nullptr);
  init_logging(mpi.rank(), mpi.size(), impl_->log_level, impl_->log_all_ranks);
  set_collective_timeout(impl_->collective_timeout);
  if (mpi.size() > 1) publish_peer_addresses();  // so that a timeout can name the rank and host it lost
  try {
    return impl_->eval->parsed() ? impl_->run_eval() : impl_->run_train();
  } catch (const PeerFailure& e) {
    spdlog::debug("{}", e.what());  // the failing rank printed the error
    return 1;
  } catch (const ReportedFailure&) {
    abort_job(1);  // logged where it happened; other ranks may be inside a collective
  } catch (const std::exception& e) {
    if (mpi.size() == 1) throw;
    // Other ranks may be inside a collective: end the whole job now, with this rank's message.
    spdlog::error("{}", e.what());
    spdlog::default_logger()->flush();
    abort_job(1);
  }
}

int ModelCommands::Impl::run_eval() {
  BertForQuestionAnswering model = load_pretrained(model_dir, model_dir + "/vocab.txt");
  model->to(select_device(device, local_rank()));
  EvalResult result =
      evaluate(model, FeatureStore::open(data_dir), output_dir, batch_size, postprocess, parse_padding(padding, "--padding"));
  if (world_rank() != 0) return 0;
  // run_qa's eval_results.json (HF's names, sorted keys), and the number of ranks that evaluated.
  nlohmann::json metrics = eval_metrics_as_hf(result, world_size());
  metrics["eval_samples"] = result.samples;
  metrics["eval_ranks"] = world_size();
  write_file_atomic(output_dir + "/eval_results.json", metrics.dump(4) + "\n");
  std::cout << metrics.dump() << "\n";
  return 0;
}

int ModelCommands::Impl::run_predict() {
  WordPieceTokenizer tokenizer(Vocab::load(model_dir + "/vocab.txt"));
  BertForQuestionAnswering model = load_pretrained(model_dir, model_dir + "/vocab.txt");
  model->to(select_device(device, 0));
  const SquadDataset data = single_question("--context/--question", "question", context, question);
  ShardHeader header;
  header.split = "eval";
  FeatureStore store = FeatureStore::from_shard(build_shard(data, 0, 1, tokenizer, header));
  const FeatureLogits logits = compute_logits(model, store, batch_size);
  const ExamplePrediction prediction = postprocess_qa_predictions(store, logits.start, logits.end, postprocess).front();
  const Candidate& best = prediction.nbest.front();
  nlohmann::ordered_json answer = {{"answer", prediction.text}, {"score", best.score}, {"probability", best.probability},
                                   {"start", best.char_begin}, {"end", best.char_end}};
  if (prediction.null_score_diff) answer["null_score_diff"] = *prediction.null_score_diff;
  std::cout << answer.dump() << "\n";
  return 0;
}

// The options that are not TrainOptions' (the process's, run_qa's switches) and the model's
// source; TrainOptions are checked by the trainer (option_checks.hpp).
void ModelCommands::Impl::check_command_line() {
  if (options.model_dir.empty() == options.model_config.empty())
    throw InputError("give exactly one of --model (an HF directory) and --model-config (random initialization)");
  if (!options.model_dir.empty() && !std::filesystem::is_directory(options.model_dir))
    throw InputError(describe("--model", options.model_dir,
                              "not a directory. A hub name (run_qa's bert-base-uncased) must be downloaded first: README.md, "
                              "\"The bert-base recipe\""));
  if (options.vocab.empty()) {
    if (options.model_dir.empty() || !std::filesystem::exists(options.model_dir + "/vocab.txt"))
      throw InputError(std::string("--vocab is required: ") +
                       (options.model_dir.empty() ? "a random model has no vocabulary" : options.model_dir + " has no vocab.txt"));
    options.vocab = options.model_dir + "/vocab.txt";
  }
  if (do_eval && options.eval_dir.empty())
    throw InputError("--do_eval needs --eval-shards (shards prepared with mpibert-prep --split eval)");
  if (threads < 0) throw InputError(describe("--threads", std::to_string(threads), "must be at least 0 (0: LibTorch's default)"));
  if (!(collective_timeout >= 0))
    throw InputError(describe("--collective-timeout", std::to_string(collective_timeout), "must be at least 0 (0: wait forever)"));
}

int ModelCommands::Impl::run_train() {
  // Every rank checks the same options; the lowest failing rank reports (the others leave quietly).
  agree_on(Ranks::of_world(), [&] { check_command_line(); });
  options.padding = parse_padding(padding, "--padding");
  options.parallel.strategy = parse_strategy(strategy);
  options.parallel.embedding_exchange = parse_embedding_exchange(embedding_exchange);
  options.config_record = "[train]\n" + train->config_to_str(true, true);
  nlohmann::ordered_json results = mpibert::train(options);
  if (results["preempted"].get<bool>()) return kExitRequeue;
  if (world_rank() != 0) return 0;
  std::cout << "results: " << options.output_dir << "/results.json\n";
  for (const char* key : {"eval_exact_match", "eval_exact", "eval_f1"})
    if (results.contains(key)) std::cout << key << " = " << results[key].dump() << "\n";
  return 0;
}

}  // namespace mpibert
