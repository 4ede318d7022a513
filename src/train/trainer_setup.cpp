// The trainer's setup: the model, the data and their checks on each rank, the ranks' agreement
// that they run the same thing, the schedule, and the data-parallel layer.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/model/encoder_parts.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/runtime/device.hpp"
#include "mpibert/train/option_checks.hpp"
#include "mpibert/train/trainer.hpp"
#include "trainer_impl.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

// What every rank must agree on before training together: the options, the model's shape and
// the data. Each rank sends its description; a rank that differs from rank 0 is named, with the
// entries that differ.
nlohmann::ordered_json run_description(const TrainOptions& o, const nlohmann::ordered_json& model_config,
                                       const std::string& tokenizer_sha256) {
  auto digest = [](const std::string& path) { return path.empty() ? std::string() : sha256_file(path); };
  nlohmann::ordered_json description;
  for_each_train_option(o, [&](const TrainOptionField& field, const auto& value) {
    if (field.records & kDescribed) description[field.name] = option_json(value);
  });
  // The files by their content: one path may name other files on other nodes.
  description["train_manifest_sha256"] = digest(o.train_dir + "/" + kManifestName);
  description["eval_manifest_sha256"] = o.eval_dir.empty() ? "" : digest(o.eval_dir + "/" + kManifestName);
  description["model_config"] = model_config;
  description["tokenizer_sha256"] = tokenizer_sha256;
  return description;
}

}  // namespace

Trainer::Trainer(const TrainOptions& options) : options_(options) {
  set_up_model_and_data();
  set_up_schedule();
  Trackers trackers = connect_trackers();
  // Setup succeeded on every rank: now the run directory is written.
  if (ranks_.root()) {
    if (options_.overwrite_output_dir) remove_earlier_run(options_.output_dir);
    fs::create_directories(options_.output_dir);
    if (!options_.config_record.empty()) write_file_atomic(options_.output_dir + "/train_config.toml", options_.config_record);
    if (auto tensorboard = make_tensorboard_tracker(options_, model().model_type(), model().architecture()))
      trackers.add(std::move(tensorboard));
    write_report_file(report_run_, trackers);
  }
  set_up_parallel();
  trackers.start();
  log_ = std::make_unique<RunLog>(options_.output_dir, ranks_.root(), ranks_.size, std::move(trackers), device_);
}

// Rank 0's trackers of --report-to that report over a network or a companion, connected before
// anything is written: one that cannot be reached ends the job on every rank, naming it.
Trackers Trainer::connect_trackers() {
  Trackers trackers;
  if (ranks_.root()) report_run_ = describe_for_trackers();
  agree_on(ranks_, [&] {
    if (ranks_.root()) trackers = connect_remote_trackers(options_, report_run_, "/proc/self/exe");
  });
  return trackers;
}

// The run as trackers show it: its name, the parameters (HF's names, what they resolved to, the
// model's config), the tags trackers filter by, and on a resume the earlier job's tracker runs.
RunDescription Trainer::describe_for_trackers() {
  RunDescription run;
  run.output_dir = options_.output_dir;
  fs::path dir = fs::absolute(options_.output_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "runs/a/"
  run.run_name = options_.run_name.empty() ? dir.filename().string() : options_.run_name;
  const std::string strategy = checkpoint_context().strategy;
  const nlohmann::ordered_json resolved = {
      {"warmup_steps", warmup_},
      {"lr_scheduler_kwargs", schedule_->resolved_kwargs()},
      {"device", device_.str()},
      {"total_steps", total_steps_},
      {"world_size", ranks_.size},
      {"global_batch_size", options_.batch_size * options_.gradient_accumulation * ranks_.size},
      {"train_samples", store_->num_features()},
      {"strategy", strategy},
      {"model_type", model().model_type()},
      {"run_name", run.run_name},
      {"num_parameters", count_parameters(model().module())}};
  run.params = tracker_params(options_, model().config_json(), resolved);
  const nlohmann::ordered_json device = describe_device(device_);
  run.tags = {{"model_type", model().model_type()},
              {"architecture", model().architecture()},
              {"strategy", strategy},
              {"world_size", std::to_string(ranks_.size)},
              {"device", device_.is_cuda() ? device.value("name", device_.str()) : device_.str()},
              {"mpibert", MPIBERT_VERSION},
              {"git_commit", mpibert_git_commit()},
              {"host", host_name()}};
  if (!resume_from_.empty()) {
    run.earlier = earlier_trackers(options_.output_dir);
    const std::string metrics = options_.output_dir + "/metrics.jsonl";
    if (fs::exists(metrics)) run.metrics_offset = static_cast<int64_t>(fs::file_size(metrics));
  }
  return run;
}

// Setup each rank does alone (any rank's failure stops all of them with one message), then the
// check that every rank runs the same thing.
void Trainer::check_shard_geometry(const std::string& dir, const FeatureParams& prepared) const {
  auto refuse = [&](const char* what, const char* prep_option, int32_t have, int32_t want) {
    throw InputError(describe(dir + "/" + kManifestName, "",
                              std::string("prepared with ") + what + " " + std::to_string(have) + ", but this run asks for " +
                                  std::to_string(want) + ": prepare the shards again with mpibert-prep " + prep_option + " " +
                                  std::to_string(want)));
  };
  const std::string unplaced = sequence_length_problem(model(), prepared.max_seq_length);
  if (!unplaced.empty())
    throw InputError(describe(dir + "/" + kManifestName, "max_seq_length " + std::to_string(prepared.max_seq_length),
                              "prepared for " + unplaced + ": prepare the shards again with mpibert-prep --max-seq-length " +
                                  std::to_string(model().positions().longest_sequence())));
  if (options_.expected_max_seq_length && prepared.max_seq_length != options_.expected_max_seq_length)
    refuse("max_seq_length", "--max-seq-length", prepared.max_seq_length, options_.expected_max_seq_length);
  if (options_.expected_doc_stride && prepared.doc_stride != options_.expected_doc_stride)
    refuse("doc_stride", "--doc-stride", prepared.doc_stride, options_.expected_doc_stride);
}

// Shards made by the run's tokenizer (token ids mean the words the model learns), which pads with
// the model's padding id and has no ids past its embedding.
void Trainer::check_shard_tokenizer(const std::string& dir, const Manifest& manifest, const HfTokenizer& tokenizer) const {
  const std::string where = dir + "/" + kManifestName;
  if (manifest.tokenizer_sha256 != tokenizer.digest())
    throw InputError(describe(
        where, "",
        "prepared with another tokenizer (" + manifest.tokenizer_kind + ", sha256 " + manifest.tokenizer_sha256.substr(0, 12) +
            ") than this run's (" + tokenizer.description() + ", sha256 " + tokenizer.digest().substr(0, 12) +
            "): token ids would mean other words; prepare them again with mpibert-prep --tokenizer " + options_.tokenizer));
  if (manifest.vocab_size > model().vocab_size())
    throw InputError(describe(where, "",
                              "prepared with a vocabulary of " + std::to_string(manifest.vocab_size) +
                                  " tokens, but the model has vocab_size " + std::to_string(model().vocab_size())));
  const int64_t model_pad = model().config_json().value("pad_token_id", static_cast<int64_t>(manifest.pad_id));
  if (model_pad != manifest.pad_id)
    throw InputError(describe(where, "",
                              "its tokenizer pads with id " + std::to_string(manifest.pad_id) +
                                  ", but the model's config.json says pad_token_id " + std::to_string(model_pad)));
}

// Evaluation shards must be the training shards' kind: the same tokenizer (token ids mean the
// same words) and sequence length (the model was trained on windows of it).
void Trainer::check_eval_shards(const Manifest& eval, const HfTokenizer& tokenizer) const {
  check_shard_geometry(options_.eval_dir, eval.params);
  const Manifest& train = store_->manifest();
  const std::string where = options_.eval_dir + "/" + kManifestName;
  check_shard_tokenizer(options_.eval_dir, eval, tokenizer);
  if (eval.params.max_seq_length != train.params.max_seq_length)
    throw InputError(describe(where, "",
                              "prepared with max_seq_length " + std::to_string(eval.params.max_seq_length) +
                                  ", the training shards with " + std::to_string(train.params.max_seq_length) +
                                  ": prepare them again with mpibert-prep --max-seq-length " +
                                  std::to_string(train.params.max_seq_length)));
}

void Trainer::set_up_model_and_data() {
  set_tf32(options_.tf32);
  set_deterministic(options_.deterministic);
  torch::manual_seed(options_.seed);
  resume_from_ = checkpoint_to_resume(checkpoint_context(), options_.resume);
  agree_on(ranks_, [&] {
    check_train_options(options_);
    check_output_dir_is_free(options_);
    device_ = select_device(options_.device, local_rank());
    model_ = options_.model_dir.empty()
                 ? make_qa_model_from_file(options_.model_config, options_.model, options_.model_type)
                 : load_qa_model(options_.model_dir, options_.tokenizer, options_.model, nullptr, options_.model_type);
    const HfTokenizer tokenizer = HfTokenizer::load(options_.tokenizer);
    tokenizer_sha256_ = tokenizer.digest();
    store_ = FeatureStore::open(options_.train_dir);
    check_shard_geometry(options_.train_dir, store_->manifest().params);
    check_shard_tokenizer(options_.train_dir, store_->manifest(), tokenizer);
    const std::string v2_flag = train_option_field(options_, options_.postprocess.version_2_with_negative).flag();
    check_squad_version(v2_flag, options_.postprocess.version_2_with_negative, options_.train_dir, *store_);
    if (!options_.eval_dir.empty()) {
      check_eval_shards(read_manifest(options_.eval_dir), tokenizer);  // before the shards are read: names the mismatch
      eval_store_ = FeatureStore::open(options_.eval_dir);
      check_squad_version(v2_flag, options_.postprocess.version_2_with_negative, options_.eval_dir, *eval_store_);
    }
    if (!resume_from_.empty()) state_ = load_training_checkpoint_model(resume_from_, checkpoint_context(), model());
    set_up_step_graphs();
  });
  model().module().to(device_);
  model().module().train();
  require_same_on_every_rank(run_description(options_, model().config_json(), tokenizer_sha256_), train_option_labels(options_));
}

void Trainer::set_up_schedule() {
  sampler_.emplace(store_->num_features(), ranks_.rank, ranks_.size, DistributedSampler::Mode::kTrain, options_.seed);
  if (options_.group_by_length) sampler_->group_by_length(feature_lengths(*store_), options_.batch_size);
  const int64_t micro_batches_per_epoch = (sampler_->size() + options_.batch_size - 1) / options_.batch_size;
  agree_on(ranks_, [&] {
    if (micro_batches_per_epoch < options_.gradient_accumulation)
      throw InputError(describe("--gradient-accumulation", std::to_string(options_.gradient_accumulation),
                                "an optimizer step needs that many micro-batches, but an epoch gives rank " +
                                    std::to_string(ranks_.rank) + " only " + std::to_string(micro_batches_per_epoch) + " (" +
                                    std::to_string(sampler_->size()) + " of the " + std::to_string(store_->num_features()) +
                                    " features in batches of " + std::to_string(options_.batch_size) +
                                    "): lower --gradient-accumulation or --batch-size, or use fewer ranks"));
  });
  steps_per_epoch_ = std::max<int64_t>(1, micro_batches_per_epoch / options_.gradient_accumulation);
  total_steps_ = options_.max_steps > 0
                     ? options_.max_steps
                     : static_cast<int64_t>(std::ceil(options_.epochs * static_cast<double>(steps_per_epoch_)));
  warmup_ = resolve_warmup_steps(options_.warmup_steps, options_.warmup_ratio, total_steps_);
  const LrScheduleParams params = lr_schedule_params(options_);  // checked with the options
  schedule_.emplace(params, options_.learning_rate, warmup_, total_steps_);
  const nlohmann::ordered_json schedule = lr_scheduler_record(params);
  if (!resume_from_.empty()) agree_on(ranks_, [&] { check_checkpoint_schedule(resume_from_, state_, schedule); });
  state_.lr_scheduler = schedule;
}

void Trainer::set_up_parallel() {
  AdamWOptions adam;
  adam.weight_decay = options_.weight_decay;
  adam.fused = options_.optim == Optim::kAdamWTorchFused;
  if (ranks_.size > 1)
    communicator_ = make_communicator(options_.device, options_.comm, device_, collective_timeout(),
                                      MpiCollectives{options_.mpi_collectives});
  parallel_ = make_data_parallel(model().description(), communicator_, adam, options_.parallel);
  if (!resume_from_.empty()) {
    agree_on(ranks_,
             [&] { load_training_checkpoint_rest(resume_from_, checkpoint_context(), state_.world_size, *parallel_, device_); });
    spdlog::info("resumed from {} at step {} (epoch {}, micro-batch {})", resume_from_, state_.global_step, state_.epoch,
                 state_.micro_batches_done);
  }
  parallel_->broadcast_parameters();
  if (options_.model.autocast_fp16) {
    loss_scaler_.emplace();
    if (state_.loss_scaler) loss_scaler_->restore(*state_.loss_scaler);
  }
  flops_per_token_ = 6.0 * static_cast<double>(model().non_embedding_parameters());
  training_flops_ = model().training_flops();
  measure_matmul_rate();
  spdlog::info("model: {} (model_type {})", model().architecture(), model().model_type());
  state_.world_size = ranks_.size;
  state_.per_rank_batch_size = options_.batch_size;
  state_.strategy = checkpoint_context().strategy;
  resumed_from_step_ = state_.global_step;
  spdlog::info(
      "training on {}: {} features, {} steps ({} per epoch, global batch {} = {} x {} accumulation x {} ranks), warmup {}, "
      "{} parameters",
      device_.str(), store_->num_features(), total_steps_, steps_per_epoch_,
      options_.batch_size * options_.gradient_accumulation * ranks_.size, options_.batch_size, options_.gradient_accumulation,
      ranks_.size, warmup_, count_parameters(model().module()));
}

// --cuda-graphs: refused, before the run directory is written, where the step cannot be captured.
void Trainer::set_up_step_graphs() {
  if (!options_.cuda_graphs) return;
  StepCaptureConditions run;
  run.cuda = device_.is_cuda();
  run.packed = options_.padding == Padding::kPacked;
  run.ranks = ranks_.size;
  run.fp16 = options_.model.autocast_fp16;
  run.accumulation = options_.gradient_accumulation;
  run.fused_adamw = options_.optim == Optim::kAdamWTorchFused;
  run.deterministic = options_.deterministic;
  run.gradient_checkpointing = options_.model.gradient_checkpointing;
  run.model_problem = model().packed_step_capture_problem();
  const std::string reason = steps_cannot_be_captured(run);
  if (!reason.empty()) throw InputError(describe("--cuda-graphs", "", reason));
  TokenBuckets buckets{options_.batch_size, store_->manifest().params.max_seq_length};
  buckets.position_limit = model().positions().longest_sequence();
  token_buckets_ = buckets;
  step_graphs_ = std::make_unique<StepGraphs>(device_);
}

CheckpointContext Trainer::checkpoint_context() const {
  return {options_.output_dir,
          options_.tokenizer,
          ranks_.rank,
          ranks_.size,
          ranks_.size > 1 ? options_.parallel.strategy : "ddp",
          options_.save_total_limit,
          options_.batch_size};
}

std::vector<int32_t> feature_lengths(const FeatureStore& store) {
  std::vector<int32_t> lengths(static_cast<size_t>(store.num_features()));
  for (int64_t i = 0; i < store.num_features(); ++i) lengths[static_cast<size_t>(i)] = store.feature(i).length;
  return lengths;
}

}  // namespace mpibert
