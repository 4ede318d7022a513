#include "mpibert/trainer.hpp"

#include <mpi.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "mpibert/checkpoint.hpp"
#include "mpibert/error.hpp"
#include "mpibert/io.hpp"
#include "mpibert/optim.hpp"
#include "mpibert/sampler.hpp"
#include "mpibert/squad_metrics.hpp"
#include "mpibert/tensorboard.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Where the loop stands; with the model, the optimizer and the RNG this is all a resume needs.
struct TrainerState {
  int64_t global_step = 0;
  int64_t epoch = 0;
  int64_t micro_batches_done = 0;  // of the current epoch's order
  std::vector<std::pair<int64_t, double>> loss_history;
  std::optional<double> best_metric;  // best eval F1 so far
  int64_t best_step = -1;

  nlohmann::ordered_json to_json(const BertConfig& config) const {
    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    for (const auto& [step, loss] : loss_history) history.push_back({{"step", step}, {"loss", loss}});
    return {{"global_step", global_step},
            {"epoch", epoch},
            {"micro_batches_done_in_epoch", micro_batches_done},
            {"best_metric", best_metric ? nlohmann::ordered_json(*best_metric) : nlohmann::ordered_json()},
            {"best_metric_name", "eval_f1"},
            {"best_step", best_step},
            {"model_config", config.to_json()},
            {"loss_history", history}};
  }
};

// Per-phase wall time, for results.json.
struct PhaseTimes {
  double data = 0, forward = 0, backward = 0, gradient_sync = 0, optimizer = 0, eval = 0;
  nlohmann::ordered_json to_json() const {
    return {{"data", data}, {"forward", forward}, {"backward", backward}, {"gradient_sync", gradient_sync},
            {"optimizer", optimizer}, {"eval", eval}};
  }
};

// The shape that a checkpoint and a run must share.
std::string shape_mismatch(const BertConfig& a, const BertConfig& b) {
  std::ostringstream out;
  auto compare = [&](const char* key, int64_t x, int64_t y) {
    if (x != y) out << (out.tellp() > 0 ? ", " : "") << key << " " << x << " (this run: " << y << ")";
  };
  compare("vocab_size", a.vocab_size, b.vocab_size);
  compare("hidden_size", a.hidden_size, b.hidden_size);
  compare("num_hidden_layers", a.num_hidden_layers, b.num_hidden_layers);
  compare("num_attention_heads", a.num_attention_heads, b.num_attention_heads);
  compare("intermediate_size", a.intermediate_size, b.intermediate_size);
  compare("max_position_embeddings", a.max_position_embeddings, b.max_position_embeddings);
  return out.str();
}

torch::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const torch::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state.clone());
}

int64_t checkpoint_step(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.rfind("checkpoint-", 0) != 0) return -1;
  try {
    return std::stoll(name.substr(11));
  } catch (const std::exception&) {
    return -1;
  }
}

std::vector<fs::path> checkpoints_by_step(const std::string& output_dir) {
  std::vector<fs::path> found;
  if (!fs::exists(output_dir)) return found;
  for (const auto& entry : fs::directory_iterator(output_dir))
    if (entry.is_directory() && checkpoint_step(entry.path()) >= 0) found.push_back(entry.path());
  std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) { return checkpoint_step(a) < checkpoint_step(b); });
  return found;
}

// An HF model directory plus optimizer.safetensors and trainer_state.json, built under a
// temporary name and renamed; older checkpoints beyond `keep` are removed.
void save_checkpoint(const TrainOptions& options, BertForQuestionAnswering& model, AdamW& optimizer, const TrainerState& state) {
  const fs::path final_dir = fs::path(options.output_dir) / ("checkpoint-" + std::to_string(state.global_step));
  const fs::path staging = fs::path(options.output_dir) / (".checkpoint-" + std::to_string(state.global_step) + ".tmp");
  fs::remove_all(staging);
  save_pretrained(model, staging.string(), options.vocab);
  std::vector<NamedTensor> tensors;
  for (auto& slot : optimizer.slots()) {
    tensors.push_back({"exp_avg." + slot.name, slot.exp_avg});
    tensors.push_back({"exp_avg_sq." + slot.name, slot.exp_avg_sq});
  }
  tensors.push_back({"adam_steps", torch::tensor(optimizer.steps_taken(), torch::kLong)});
  tensors.push_back({"cpu_rng_state", cpu_rng_state()});
  write_safetensors((staging / "optimizer.safetensors").string(), tensors);
  write_file_atomic((staging / "trainer_state.json").string(), state.to_json(model->config()).dump(2) + "\n");
  fs::remove_all(final_dir);
  rename_file(staging.string(), final_dir.string());
  spdlog::info("checkpoint: {}", final_dir.string());
  auto all = checkpoints_by_step(options.output_dir);
  for (size_t i = 0; options.save_total_limit > 0 && i + static_cast<size_t>(options.save_total_limit) < all.size(); ++i)
    fs::remove_all(all[i]);
}

TrainerState load_checkpoint(const std::string& dir, const std::string& vocab, BertForQuestionAnswering& model, AdamW& optimizer) {
  const BertConfig saved = BertConfig::load(dir + "/config.json");
  if (std::string mismatch = shape_mismatch(saved, model->config()); !mismatch.empty())
    throw InputError(describe(dir, "", "checkpoint of another model shape: " + mismatch));
  if (!vocab.empty() && read_file_bytes(dir + "/vocab.txt") != read_file_bytes(vocab))
    throw InputError(describe(dir, "", "checkpoint trained with another vocab than " + vocab + " (its own is vocab.txt there)"));
  load_state(model, SafetensorsFile::open(dir + "/model.safetensors"));
  SafetensorsFile moments = SafetensorsFile::open(dir + "/optimizer.safetensors");
  torch::NoGradGuard no_grad;
  for (auto& slot : optimizer.slots()) {
    slot.exp_avg.copy_(moments.get("exp_avg." + slot.name));
    slot.exp_avg_sq.copy_(moments.get("exp_avg_sq." + slot.name));
  }
  optimizer.set_steps_taken(moments.get("adam_steps").item<int64_t>());
  set_cpu_rng_state(moments.get("cpu_rng_state"));
  const auto json = nlohmann::json::parse(read_file(dir + "/trainer_state.json"));
  TrainerState state;
  state.global_step = json.at("global_step");
  state.epoch = json.at("epoch");
  state.micro_batches_done = json.at("micro_batches_done_in_epoch");
  for (const auto& entry : json.at("loss_history")) state.loss_history.emplace_back(entry.at("step"), entry.at("loss"));
  if (json.contains("best_metric") && !json["best_metric"].is_null()) state.best_metric = json["best_metric"].get<double>();
  state.best_step = json.value("best_step", int64_t{-1});
  return state;
}

// The gold answers held by evaluation shards, as the scorer reads them from a dataset.
SquadDataset gold_answers(const FeatureStore& store, const std::string& origin) {
  SquadDataset data;
  data.path = origin;
  for (int64_t e = 0; e < store.num_examples(); ++e) {
    const ExampleView view = store.example(e);
    Example example;
    example.id = *view.id;
    example.is_impossible = view.is_impossible;
    for (const auto& answer : nlohmann::json::parse(*view.answers_json)) example.answers.push_back({answer.at("text"), answer.at("answer_start")});
    data.examples.push_back(std::move(example));
  }
  return data;
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%02lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return buffer;
}

nlohmann::ordered_json environment(int64_t world_size) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (auto comma = mpi.find(','); comma != std::string::npos) mpi.resize(comma);
  return {{"host", host},
          {"world_size", world_size},
          {"devices", "cpu"},
          {"torch_threads", torch::get_num_threads()},
          {"libtorch", TORCH_VERSION},
          {"mpi", mpi},
          {"hdf5", hdf5_library_version()},
          {"nccl", nullptr},
          {"git_commit", MPIBERT_GIT_COMMIT},
          {"mpibert", MPIBERT_VERSION}};
}

}  // namespace

FeatureLogits compute_logits(BertForQuestionAnswering& model, const FeatureStore& store, int64_t batch_size) {
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  FeatureLogits logits;
  logits.start.resize(static_cast<size_t>(store.num_features()));
  logits.end.resize(logits.start.size());
  double loss_sum = 0;
  for (int64_t first = 0; first < store.num_features(); first += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = first; i < std::min(first + batch_size, store.num_features()); ++i) indices.push_back(i);
    Batch batch = make_batch(store, indices, Padding::kDynamic);
    QAOutput out = model->forward(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.start_positions,
                                  batch.end_positions);
    loss_sum += out.loss.item<double>() * static_cast<double>(indices.size());
    auto starts = out.start_logits.to(torch::kFloat).contiguous(), ends = out.end_logits.to(torch::kFloat).contiguous();
    for (size_t row = 0; row < indices.size(); ++row) {
      const auto length = static_cast<size_t>(store.feature(indices[row]).length);
      const float* s = starts[static_cast<int64_t>(row)].data_ptr<float>();
      const float* e = ends[static_cast<int64_t>(row)].data_ptr<float>();
      logits.start[static_cast<size_t>(indices[row])].assign(s, s + length);
      logits.end[static_cast<size_t>(indices[row])].assign(e, e + length);
    }
  }
  if (was_training) model->train();
  logits.loss = store.num_features() ? loss_sum / static_cast<double>(store.num_features()) : 0.0;
  return logits;
}

std::vector<int32_t> feature_lengths(const FeatureStore& store) {
  std::vector<int32_t> lengths(static_cast<size_t>(store.num_features()));
  for (int64_t i = 0; i < store.num_features(); ++i) lengths[static_cast<size_t>(i)] = store.feature(i).length;
  return lengths;
}

EvalResult evaluate(BertForQuestionAnswering& model, const FeatureStore& store, const std::string& predictions_dir,
                    int64_t batch_size, const PostprocessOptions& postprocess) {
  const auto start = Clock::now();
  const FeatureLogits logits = compute_logits(model, store, batch_size);
  SquadDataset gold = gold_answers(store, "the evaluation shards");
  PostprocessOptions options = postprocess;
  options.version_2_with_negative = options.version_2_with_negative || uses_squad_v2_rules(gold);
  auto predictions = postprocess_qa_predictions(store, logits.start, logits.end, options);
  write_prediction_files(predictions, predictions_dir, options.version_2_with_negative);

  SquadPredictions answers;
  ScoreOptions score_options;
  score_options.v2 = options.version_2_with_negative;
  if (score_options.v2) score_options.na_probs.emplace();  // HF run_qa passes no-answer probability 0
  for (const auto& prediction : predictions) {
    answers.emplace_back(prediction.id, prediction.text);
    if (score_options.v2) score_options.na_probs->push_back({prediction.id, 0.0, false});
  }
  std::ostringstream diagnostics;
  EvalResult result;
  result.metrics = score_squad(gold, answers, score_options, diagnostics);
  result.loss = logits.loss;
  result.samples = store.num_features();
  result.seconds = seconds_since(start);
  return result;
}

nlohmann::ordered_json train(const TrainOptions& options, const TrainHooks& hooks) {
  const auto run_start = Clock::now();
  fs::create_directories(options.output_dir);
  torch::manual_seed(options.seed);
  BertForQuestionAnswering model = options.model_dir.empty()
                                        ? BertForQuestionAnswering(BertConfig::load(options.model_config), options.model)
                                        : load_pretrained(options.model_dir, options.vocab, options.model);
  model->train();
  FeatureStore store = FeatureStore::open(options.train_dir);
  if (store.manifest().vocab_size && store.manifest().vocab_size != model->config().vocab_size)
    throw InputError(describe(options.train_dir, "", "prepared with a vocab of " + std::to_string(store.manifest().vocab_size) +
                                                         " tokens, but the model has vocab_size " +
                                                         std::to_string(model->config().vocab_size)));

  DistributedSampler sampler(store.num_features(), 0, 1, DistributedSampler::Mode::kTrain, options.seed);
  if (options.group_by_length) sampler.group_by_length(feature_lengths(store), options.batch_size);
  const int64_t micro_batches_per_epoch = (sampler.size() + options.batch_size - 1) / options.batch_size;
  const int64_t steps_per_epoch = std::max<int64_t>(1, micro_batches_per_epoch / options.gradient_accumulation);
  const auto total_steps = static_cast<int64_t>(std::ceil(options.epochs * static_cast<double>(steps_per_epoch)));
  const int64_t warmup = options.warmup_steps > 0 ? options.warmup_steps
                                                  : LinearSchedule::warmup_steps_for_ratio(options.warmup_ratio, total_steps);
  LinearSchedule schedule(options.learning_rate, warmup, total_steps);

  std::vector<torch::Tensor> parameters = model->parameters();
  AdamWOptions adam;
  adam.weight_decay = options.weight_decay;
  AdamW optimizer(model->named_parameters(), adam);

  TrainerState state;
  int64_t resumed_from_step = 0;
  std::string resume_from = options.resume;
  if (resume_from == "auto") {
    auto found = checkpoints_by_step(options.output_dir);
    resume_from = found.empty() ? "" : found.back().string();
  }
  if (!resume_from.empty()) {
    state = load_checkpoint(resume_from, options.vocab, model, optimizer);
    resumed_from_step = state.global_step;
    spdlog::info("resumed from {} at step {} (epoch {}, micro-batch {})", resume_from, state.global_step, state.epoch,
                 state.micro_batches_done);
  }
  spdlog::info("training: {} features, {} steps ({} per epoch, batch {} x {} accumulation), warmup {}, {} parameters",
               store.num_features(), total_steps, steps_per_epoch, options.batch_size, options.gradient_accumulation, warmup,
               count_parameters(*model));

  TensorBoardWriter tensorboard(options.output_dir + "/tensorboard");
  // Evaluation at a step: metrics into TensorBoard, prediction files into the run directory,
  // and the best F1 into the trainer state (so checkpoints carry it).
  std::optional<FeatureStore> eval_store;
  std::optional<EvalResult> last_eval;
  int64_t last_eval_step = -1;
  double eval_seconds = 0;
  auto run_evaluation = [&] {
    const auto t = Clock::now();
    if (!eval_store) eval_store = FeatureStore::open(options.eval_dir);
    last_eval = evaluate(model, *eval_store, options.output_dir, options.eval_batch_size, options.postprocess);
    last_eval_step = state.global_step;
    eval_seconds += seconds_since(t);
    tensorboard.add_scalar("eval/loss", last_eval->loss, state.global_step);
    for (const char* key : {"exact_match", "exact", "f1", "best_f1"})
      if (last_eval->metrics.contains(key))
        tensorboard.add_scalar(std::string("eval/") + key, last_eval->metrics[key].get<double>(), state.global_step);
    const double f1 = last_eval->metrics["f1"].get<double>();
    if (!state.best_metric || f1 > *state.best_metric) {
      state.best_metric = f1;
      state.best_step = state.global_step;
    }
    spdlog::info("eval at step {}: {} loss {:.4f}", state.global_step, last_eval->metrics.dump(), last_eval->loss);
  };
  StepProfiler profiler(options.profile ? options.output_dir + "/profile/trace.json" : "", options.profile_schedule);
  PhaseTimes phases;
  int64_t steps_this_run = 0, samples_this_run = 0;
  const auto loop_start = Clock::now();
  bool stopped_early = false;
  while (state.global_step < total_steps && !stopped_early) {
    const std::vector<int64_t> order = sampler.indices(state.epoch);
    while (state.micro_batches_done + options.gradient_accumulation <= steps_per_epoch * options.gradient_accumulation &&
           state.global_step < total_steps) {
      profiler.before_step(steps_this_run);
      const auto step_start = Clock::now();
      double step_loss = 0;
      for (int64_t micro = 0; micro < options.gradient_accumulation; ++micro, ++state.micro_batches_done) {
        auto t = Clock::now();
        const auto first = static_cast<size_t>(state.micro_batches_done * options.batch_size);
        const std::vector<int64_t> indices(order.begin() + static_cast<long>(first),
                                           order.begin() + static_cast<long>(std::min(order.size(), first + static_cast<size_t>(options.batch_size))));
        Batch batch;
        {
          MPIBERT_PROFILE_RANGE("mpibert::data");
          batch = make_batch(store, indices, options.padding);
        }
        phases.data += seconds_since(t);
        t = Clock::now();
        torch::Tensor loss;
        {
          MPIBERT_PROFILE_RANGE("mpibert::forward");
          QAOutput out = model->forward(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.start_positions,
                                        batch.end_positions);
          loss = out.loss / static_cast<double>(options.gradient_accumulation);
        }
        phases.forward += seconds_since(t);
        t = Clock::now();
        {
          MPIBERT_PROFILE_RANGE("mpibert::backward");
          loss.backward();
        }
        phases.backward += seconds_since(t);
        step_loss += loss.item<double>();
        samples_this_run += static_cast<int64_t>(indices.size());
      }
      auto t = Clock::now();
      if (hooks.synchronize_gradients) {
        MPIBERT_PROFILE_RANGE("mpibert::gradient_sync");
        hooks.synchronize_gradients(parameters);
      }
      phases.gradient_sync += seconds_since(t);
      t = Clock::now();
      double grad_norm = 0;
      const double lr = schedule.lr(state.global_step);
      {
        MPIBERT_PROFILE_RANGE("mpibert::optimizer");
        grad_norm = clip_grad_norm(parameters, options.max_grad_norm).item<double>();
        optimizer.step(lr);
        optimizer.zero_grad();
      }
      phases.optimizer += seconds_since(t);
      profiler.after_step(steps_this_run);
      ++state.global_step;
      ++steps_this_run;
      state.loss_history.emplace_back(state.global_step, step_loss);

      const double step_time = seconds_since(step_start);
      const double samples_per_second = static_cast<double>(samples_this_run) / seconds_since(loop_start);
      tensorboard.add_scalar("train/loss", step_loss, state.global_step);
      tensorboard.add_scalar("train/learning_rate", lr, state.global_step);
      tensorboard.add_scalar("train/grad_norm", grad_norm, state.global_step);
      tensorboard.add_scalar("train/samples_per_second", samples_per_second, state.global_step);
      tensorboard.add_scalar("train/step_time", step_time, state.global_step);
      if (options.logging_steps > 0 && (state.global_step % options.logging_steps == 0 || state.global_step == total_steps)) {
        const double eta = seconds_since(loop_start) / static_cast<double>(steps_this_run) * static_cast<double>(total_steps - state.global_step);
        spdlog::info("step {}/{} epoch {:.2f} loss {:.4f} lr {:.3e} grad_norm {:.3f} samples/s {:.1f} ETA {}", state.global_step,
                     total_steps, static_cast<double>(state.global_step) / static_cast<double>(steps_per_epoch), step_loss, lr,
                     grad_norm, samples_per_second, format_duration(eta));
        tensorboard.flush();
      }
      if (!options.eval_dir.empty() && options.eval_steps > 0 && state.global_step % options.eval_steps == 0) run_evaluation();
      const bool stop_now = options.stop_after_steps > 0 && steps_this_run == options.stop_after_steps && state.global_step < total_steps;
      if ((options.save_steps > 0 && state.global_step % options.save_steps == 0) || stop_now)
        save_checkpoint(options, model, optimizer, state);
      if (stop_now) {
        spdlog::info("stopping after {} steps as asked; resume with --resume auto", steps_this_run);
        stopped_early = true;
        break;
      }
    }
    if (!stopped_early) {
      ++state.epoch;
      state.micro_batches_done = 0;
    }
  }
  const double train_runtime = seconds_since(run_start);  // as HF: periodic evaluations included, the final one not
  if (!options.eval_dir.empty() && !stopped_early && last_eval_step != state.global_step) run_evaluation();
  if (!stopped_early) save_checkpoint(options, model, optimizer, state);

  double loss_sum = 0;
  for (const auto& [step, loss] : state.loss_history) loss_sum += loss;
  nlohmann::ordered_json results = {
      {"train_runtime", train_runtime},
      {"train_samples", store.num_features()},
      {"train_samples_per_second", static_cast<double>(samples_this_run) / train_runtime},
      {"train_steps_per_second", static_cast<double>(steps_this_run) / train_runtime},
      {"train_loss", state.loss_history.empty() ? 0.0 : loss_sum / static_cast<double>(state.loss_history.size())},
      {"epoch", static_cast<double>(state.global_step) / static_cast<double>(steps_per_epoch)},
  };
  phases.eval = eval_seconds;
  if (last_eval && !stopped_early) {
    for (const auto& [key, value] : last_eval->metrics.items()) results["eval_" + key] = value;
    results["eval_loss"] = last_eval->loss;
    results["eval_runtime"] = last_eval->seconds;
    results["eval_samples"] = last_eval->samples;
    results["eval_samples_per_second"] = static_cast<double>(last_eval->samples) / last_eval->seconds;
    results["best_eval_f1"] = *state.best_metric;
    results["best_step"] = state.best_step;
  }
  tensorboard.flush();
  results["stopped_early"] = stopped_early;
  results["global_step"] = state.global_step;
  results["resumed_from_step"] = resumed_from_step;
  results["phase_seconds"] = phases.to_json();
  results["environment"] = environment(1);
  results["parameters"] = {{"epochs", options.epochs},
                           {"batch_size", options.batch_size},
                           {"gradient_accumulation", options.gradient_accumulation},
                           {"learning_rate", options.learning_rate},
                           {"weight_decay", options.weight_decay},
                           {"warmup_steps", warmup},
                           {"max_grad_norm", options.max_grad_norm},
                           {"seed", options.seed},
                           {"padding", options.padding == Padding::kDynamic ? "dynamic" : "full"},
                           {"group_by_length", options.group_by_length},
                           {"total_steps", total_steps},
                           {"model", model->config().to_json()}};
  write_file_atomic(options.output_dir + "/results.json", results.dump(2) + "\n");
  return results;
}

}  // namespace mpibert
