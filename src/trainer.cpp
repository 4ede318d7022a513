#include "mpibert/trainer.hpp"

#include <mpi.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "mpibert/checkpoint.hpp"
#include "mpibert/comm.hpp"
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

// This process's place in the job.
struct Ranks {
  int rank = 0, size = 1;
  bool root() const { return rank == 0; }
};

std::vector<double> sum_across(const Ranks& ranks, std::vector<double> values, const std::string& what) {
  return ranks.size > 1 ? sum_over_ranks(std::move(values), what) : values;
}

// Runs `setup` (work each rank does alone, such as reading files) and agrees on its outcome: if any
// rank failed, the lowest failing rank rethrows its error and the others leave quietly, so one
// message is printed and no rank is left waiting in a collective.
template <typename Setup>
void agree_on(const Ranks& ranks, Setup&& setup) {
  if (ranks.size == 1) return setup();
  std::exception_ptr error;
  try {
    setup();
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  const int failing = lowest_failing_rank(!error);
  if (failing == ranks.rank) std::rethrow_exception(error);
  if (failing >= 0) throw PeerFailure("rank " + std::to_string(failing) + " failed during setup");
}

// SIGTERM and SIGUSR1 (SLURM's warning before preemption or the time limit) ask for a checkpoint
// and a clean exit after the current step.
std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int signal) { stop_signal = signal; }

class StopSignals {
 public:
  StopSignals() {
    stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previous_term_);
    sigaction(SIGUSR1, &action, &previous_usr1_);
  }
  ~StopSignals() {
    sigaction(SIGTERM, &previous_term_, nullptr);
    sigaction(SIGUSR1, &previous_usr1_, nullptr);
  }

 private:
  struct sigaction previous_term_ {}, previous_usr1_ {};
};

// Fault injection for the failure tests, each RANK:STEP, acting when that rank starts that step:
// MPIBERT_INJECT_FAILURE throws, MPIBERT_INJECT_HANG stops responding, MPIBERT_INJECT_SIGNAL
// raises SIGUSR1 (as SLURM's warning would, on one rank only).
struct Fault {
  int rank = -1;
  int64_t step = -1;
};

Fault fault_from_environment(const char* variable) {
  Fault fault;
  if (const char* value = std::getenv(variable)) {
    if (std::sscanf(value, "%d:%lld", &fault.rank, reinterpret_cast<long long*>(&fault.step)) != 2)
      throw InputError(describe(variable, value, "expected RANK:STEP"));
  }
  return fault;
}

void inject_faults(const Ranks& ranks, int64_t step) {
  static const Fault failure = fault_from_environment("MPIBERT_INJECT_FAILURE");
  static const Fault hang = fault_from_environment("MPIBERT_INJECT_HANG");
  static const Fault signal = fault_from_environment("MPIBERT_INJECT_SIGNAL");
  if (signal.rank == ranks.rank && signal.step == step) std::raise(SIGUSR1);
  if (failure.rank == ranks.rank && failure.step == step)
    throw std::runtime_error("injected failure at step " + std::to_string(step) + " (MPIBERT_INJECT_FAILURE)");
  if (hang.rank == ranks.rank && hang.step == step) {
    spdlog::warn("injected hang at step {} (MPIBERT_INJECT_HANG)", step);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Where the loop stands; with the model, the optimizer and the RNG this is all a resume needs.
struct TrainerState {
  int64_t global_step = 0;
  int64_t epoch = 0;
  int64_t micro_batches_done = 0;  // of the current epoch's order, on each rank
  std::vector<std::pair<int64_t, double>> loss_history;
  std::optional<double> best_metric;  // best eval F1 so far
  int64_t best_step = -1;
  int world_size = 1;
  std::string strategy = "ddp";

  nlohmann::ordered_json to_json(const BertConfig& config) const {
    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    for (const auto& [step, loss] : loss_history) history.push_back({{"step", step}, {"loss", loss}});
    return {{"global_step", global_step},
            {"epoch", epoch},
            {"micro_batches_done_in_epoch", micro_batches_done},
            {"world_size", world_size},
            {"strategy", strategy},
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
  std::vector<double> values() const { return {data, forward, backward, gradient_sync, optimizer, eval}; }
  static nlohmann::ordered_json to_json(const std::vector<double>& v) {
    return {{"data", v[0]}, {"forward", v[1]}, {"backward", v[2]}, {"gradient_sync", v[3]}, {"optimizer", v[4]}, {"eval", v[5]}};
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

std::string rank_file(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

// An HF model directory plus the optimizer state and trainer_state.json, built under a temporary
// name and renamed once every rank has written its part: rank 0 the model, the trainer state and
// (unless sharded) the optimizer; every rank its RNG state and (zero1) its optimizer slices.
// Older checkpoints beyond save_total_limit are removed. The run directory must be shared by the
// ranks (it is on one node, and on a cluster's shared file system).
void save_checkpoint(const TrainOptions& options, const Ranks& ranks, BertForQuestionAnswering& model, DataParallel& parallel,
                     const TrainerState& state) {
  const fs::path final_dir = fs::path(options.output_dir) / ("checkpoint-" + std::to_string(state.global_step));
  const fs::path staging = fs::path(options.output_dir) / (".checkpoint-" + std::to_string(state.global_step) + ".tmp");
  if (ranks.root()) {
    fs::remove_all(staging);
    fs::create_directories(staging);
  }
  if (ranks.size > 1) barrier("the checkpoint directory " + staging.string());
  if (ranks.root()) {
    save_pretrained(model, staging.string(), options.vocab);
    if (!parallel.optimizer_state_is_sharded())
      write_safetensors((staging / "optimizer.safetensors").string(), parallel.optimizer_state());
    write_file_atomic((staging / "trainer_state.json").string(), state.to_json(model->config()).dump(2) + "\n");
  }
  std::vector<NamedTensor> own = {{"cpu_rng_state", cpu_rng_state()}};
  if (parallel.optimizer_state_is_sharded())
    for (auto& tensor : parallel.optimizer_state()) own.push_back(tensor);
  write_safetensors((staging / rank_file(ranks.rank)).string(), own);
  if (ranks.size > 1) barrier("every rank's part of " + final_dir.string());
  if (ranks.root()) {
    fs::remove_all(final_dir);
    rename_file(staging.string(), final_dir.string());
    spdlog::info("checkpoint: {}", final_dir.string());
    auto all = checkpoints_by_step(options.output_dir);
    for (size_t i = 0; options.save_total_limit > 0 && i + static_cast<size_t>(options.save_total_limit) < all.size(); ++i)
      fs::remove_all(all[i]);
  }
  if (ranks.size > 1) barrier("the rename of " + final_dir.string());
}

// The trainer state and the model weights of a checkpoint; refuses a checkpoint of another model
// shape, vocab, number of ranks or strategy.
TrainerState load_checkpoint_model(const std::string& dir, const TrainOptions& options, const Ranks& ranks,
                                   BertForQuestionAnswering& model) {
  const auto json = nlohmann::json::parse(read_file(dir + "/trainer_state.json"));
  TrainerState state;
  state.world_size = json.value("world_size", 1);
  state.strategy = json.value("strategy", std::string("ddp"));
  const std::string strategy = ranks.size > 1 ? strategy_name(options.parallel.strategy) : "ddp";
  if (state.world_size != ranks.size)
    throw InputError(describe(dir, "trainer_state.json", "written by a run of " + std::to_string(state.world_size) +
                                                             " ranks; this run has " + std::to_string(ranks.size) +
                                                             ": resume with the same number of ranks (the data order and the "
                                                             "global batch depend on it)"));
  if (ranks.size > 1 && state.strategy != strategy)
    throw InputError(describe(dir, "trainer_state.json", "written with --strategy " + state.strategy + "; this run uses " + strategy));
  const BertConfig saved = BertConfig::load(dir + "/config.json");
  if (std::string mismatch = shape_mismatch(saved, model->config()); !mismatch.empty())
    throw InputError(describe(dir, "", "checkpoint of another model shape: " + mismatch));
  if (!options.vocab.empty() && read_file_bytes(dir + "/vocab.txt") != read_file_bytes(options.vocab))
    throw InputError(describe(dir, "", "checkpoint trained with another vocab than " + options.vocab + " (its own is vocab.txt there)"));
  load_state(model, SafetensorsFile::open(dir + "/model.safetensors"));
  state.global_step = json.at("global_step");
  state.epoch = json.at("epoch");
  state.micro_batches_done = json.at("micro_batches_done_in_epoch");
  for (const auto& entry : json.at("loss_history")) state.loss_history.emplace_back(entry.at("step"), entry.at("loss"));
  if (json.contains("best_metric") && !json["best_metric"].is_null()) state.best_metric = json["best_metric"].get<double>();
  state.best_step = json.value("best_step", int64_t{-1});
  return state;
}

void load_checkpoint_optimizer(const std::string& dir, const Ranks& ranks, DataParallel& parallel) {
  const std::string own_path = dir + "/" + rank_file(ranks.rank);
  SafetensorsFile own = SafetensorsFile::open(own_path);
  if (parallel.optimizer_state_is_sharded()) {
    parallel.load_optimizer_state(own, own_path);
  } else {
    parallel.load_optimizer_state(SafetensorsFile::open(dir + "/optimizer.safetensors"), dir + "/optimizer.safetensors");
  }
  set_cpu_rng_state(own.get("cpu_rng_state"));
}

// What every rank must agree on before training together: the options, the model's shape and
// the data. Each rank sends its description; a rank that differs from rank 0 is named, with the
// entries that differ.
nlohmann::ordered_json run_description(const TrainOptions& o, const BertConfig& config) {
  auto digest = [](const std::string& path) { return path.empty() ? std::string() : sha256_file(path); };
  return {{"train_shards", o.train_dir},
          {"train_manifest_sha256", digest(o.train_dir + "/" + kManifestName)},
          {"eval_shards", o.eval_dir},
          {"eval_manifest_sha256", o.eval_dir.empty() ? "" : digest(o.eval_dir + "/" + kManifestName)},
          {"output_dir", o.output_dir},
          {"model", o.model_dir},
          {"model_config", config.to_json()},
          {"vocab_sha256", digest(o.vocab)},
          {"resume", o.resume},
          {"epochs", o.epochs},
          {"max_steps", o.max_steps},
          {"batch_size", o.batch_size},
          {"gradient_accumulation", o.gradient_accumulation},
          {"learning_rate", o.learning_rate},
          {"weight_decay", o.weight_decay},
          {"warmup_steps", o.warmup_steps},
          {"warmup_ratio", o.warmup_ratio},
          {"max_grad_norm", o.max_grad_norm},
          {"seed", o.seed},
          {"padding", o.padding == Padding::kDynamic ? "dynamic" : "full"},
          {"group_by_length", o.group_by_length},
          {"stop_after_steps", o.stop_after_steps},
          {"save_steps", o.save_steps},
          {"eval_steps", o.eval_steps},
          {"eval_batch_size", o.eval_batch_size},
          {"strategy", strategy_name(o.parallel.strategy)},
          {"bucket_mb", o.parallel.bucket_mb}};
}

void require_same_run_on_every_rank(const Ranks& ranks, const nlohmann::ordered_json& description) {
  if (ranks.size == 1) return;
  const std::vector<std::string> all = all_gather_strings(description.dump());
  std::ostringstream problems;
  const auto reference = nlohmann::json::parse(all[0]).flatten();
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto other = nlohmann::json::parse(all[r]).flatten();
    problems << "\n  rank " << r << " differs from rank 0:";
    for (const auto& [key, value] : reference.items())
      if (!other.contains(key) || other[key] != value)
        problems << " " << key << " = " << (other.contains(key) ? other[key].dump() : "(none)") << " (rank 0: " << value.dump() << ");";
  }
  if (problems.tellp() == 0) return;
  if (ranks.root()) throw InputError("the ranks were started with different runs; every rank must get the same options and files:" + problems.str());
  throw PeerFailure("this rank's run differs from rank 0's");
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

// "model name" from /proc/cpuinfo, for the run record ("" where there is none).
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0)
      if (auto colon = line.find(':'); colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  return "";
}

nlohmann::ordered_json environment(int64_t world_size, const std::string& backend) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, static_cast<size_t>(length));
  if (auto comma = mpi.find(','); comma != std::string::npos) mpi.resize(comma);
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  return {{"host", host},
          {"world_size", world_size},
          {"devices", "cpu"},
          {"cpu_model", cpu_model()},
          {"cpus_online", std::thread::hardware_concurrency()},
          {"communication", backend},
          {"torch_threads", torch::get_num_threads()},
          {"libtorch", TORCH_VERSION},
          {"mpi", mpi},
          {"hdf5", hdf5_library_version()},
          {"nccl", nullptr},
          {"slurm_job_id", slurm_job ? nlohmann::ordered_json(slurm_job) : nlohmann::ordered_json()},
          {"git_commit", MPIBERT_GIT_COMMIT},
          {"mpibert", MPIBERT_VERSION}};
}

}  // namespace

FeatureLogits compute_logits(BertForQuestionAnswering& model, const FeatureStore& store, int64_t batch_size, int64_t first,
                             int64_t last) {
  if (last < 0) last = store.num_features();
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  FeatureLogits logits;
  logits.start.resize(static_cast<size_t>(store.num_features()));
  logits.end.resize(logits.start.size());
  for (int64_t begin = first; begin < last; begin += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = begin; i < std::min(begin + batch_size, last); ++i) indices.push_back(i);
    Batch batch = make_batch(store, indices, Padding::kDynamic);
    QAOutput out = model->forward(batch.input_ids, batch.token_type_ids, batch.attention_mask, batch.start_positions,
                                  batch.end_positions);
    logits.loss_sum += out.loss.item<double>() * static_cast<double>(indices.size());
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
  const Ranks ranks{world_rank(), world_size()};
  // Whole batches per rank, the same batches one rank would make: the logits do not depend on
  // the number of ranks.
  const int64_t n = store.num_features(), batches = (n + batch_size - 1) / batch_size;
  const int64_t first = std::min(n, batches * ranks.rank / ranks.size * batch_size);
  const int64_t last = std::min(n, batches * (ranks.rank + 1) / ranks.size * batch_size);
  FeatureLogits logits = compute_logits(model, store, batch_size, first, last);
  if (ranks.size > 1) {
    std::vector<float> mine;
    for (int64_t i = first; i < last; ++i) {
      const auto& s = logits.start[static_cast<size_t>(i)];
      const auto& e = logits.end[static_cast<size_t>(i)];
      mine.insert(mine.end(), s.begin(), s.end());
      mine.insert(mine.end(), e.begin(), e.end());
    }
    const std::vector<float> all = gather_to_root(mine, "the gather of evaluation logits");
    logits.loss_sum = sum_over_ranks({logits.loss_sum}, "the sum of evaluation losses")[0];
    if (ranks.root()) {  // rank order is feature order
      auto next = all.begin();
      for (int64_t i = 0; i < n; ++i) {
        const auto length = static_cast<long>(store.feature(i).length);
        logits.start[static_cast<size_t>(i)].assign(next, next + length);
        logits.end[static_cast<size_t>(i)].assign(next + length, next + 2 * length);
        next += 2 * length;
      }
    }
  }
  EvalResult result;
  if (ranks.root()) {
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
    result.metrics = score_squad(gold, answers, score_options, diagnostics);
  }
  if (ranks.size > 1)
    result.metrics = nlohmann::ordered_json::parse(broadcast_string(result.metrics.dump(), 0, "the evaluation metrics"));
  result.loss = n ? logits.loss_sum / static_cast<double>(n) : 0.0;
  result.samples = n;
  result.seconds = seconds_since(start);
  return result;
}

nlohmann::ordered_json train(const TrainOptions& options) {
  const auto run_start = Clock::now();
  const Ranks ranks{world_rank(), world_size()};
  if (ranks.root()) fs::create_directories(options.output_dir);

  // Setup each rank does alone; any rank's failure stops all of them with one message.
  torch::manual_seed(options.seed);
  std::optional<BertForQuestionAnswering> model_holder;
  std::optional<FeatureStore> store_holder;
  TrainerState state;
  std::string resume_from = options.resume;
  agree_on(ranks, [&] {
    model_holder = options.model_dir.empty() ? BertForQuestionAnswering(BertConfig::load(options.model_config), options.model)
                                             : load_pretrained(options.model_dir, options.vocab, options.model);
    store_holder = FeatureStore::open(options.train_dir);
    if (store_holder->manifest().vocab_size && store_holder->manifest().vocab_size != (*model_holder)->config().vocab_size)
      throw InputError(describe(options.train_dir, "", "prepared with a vocab of " + std::to_string(store_holder->manifest().vocab_size) +
                                                           " tokens, but the model has vocab_size " +
                                                           std::to_string((*model_holder)->config().vocab_size)));
    if (resume_from == "auto") {
      auto found = checkpoints_by_step(options.output_dir);
      resume_from = found.empty() ? "" : found.back().string();
    }
    if (!resume_from.empty()) state = load_checkpoint_model(resume_from, options, ranks, *model_holder);
  });
  BertForQuestionAnswering& model = *model_holder;
  const FeatureStore& store = *store_holder;
  model->train();
  require_same_run_on_every_rank(ranks, run_description(options, model->config()));

  DistributedSampler sampler(store.num_features(), ranks.rank, ranks.size, DistributedSampler::Mode::kTrain, options.seed);
  if (options.group_by_length) sampler.group_by_length(feature_lengths(store), options.batch_size);
  const int64_t micro_batches_per_epoch = (sampler.size() + options.batch_size - 1) / options.batch_size;
  const int64_t steps_per_epoch = std::max<int64_t>(1, micro_batches_per_epoch / options.gradient_accumulation);
  const int64_t total_steps = options.max_steps > 0 ? options.max_steps
                                                    : static_cast<int64_t>(std::ceil(options.epochs * static_cast<double>(steps_per_epoch)));
  const int64_t warmup = options.warmup_steps > 0 ? options.warmup_steps
                                                  : LinearSchedule::warmup_steps_for_ratio(options.warmup_ratio, total_steps);
  LinearSchedule schedule(options.learning_rate, warmup, total_steps);

  AdamWOptions adam;
  adam.weight_decay = options.weight_decay;
  std::shared_ptr<Communicator> communicator;
  if (ranks.size > 1) communicator = make_mpi_communicator(collective_timeout());
  DataParallel parallel(model, communicator, adam, options.parallel);
  if (!resume_from.empty()) {
    agree_on(ranks, [&] { load_checkpoint_optimizer(resume_from, ranks, parallel); });
    spdlog::info("resumed from {} at step {} (epoch {}, micro-batch {})", resume_from, state.global_step, state.epoch,
                 state.micro_batches_done);
  }
  parallel.broadcast_parameters();
  state.world_size = ranks.size;
  state.strategy = ranks.size > 1 ? strategy_name(options.parallel.strategy) : "ddp";
  const int64_t resumed_from_step = state.global_step;
  const int64_t global_batch = options.batch_size * options.gradient_accumulation * ranks.size;
  spdlog::info("training: {} features, {} steps ({} per epoch, global batch {} = {} x {} accumulation x {} ranks), warmup {}, {} parameters",
               store.num_features(), total_steps, steps_per_epoch, global_batch, options.batch_size, options.gradient_accumulation,
               ranks.size, warmup, count_parameters(*model));

  // Rank 0 logs scalars to TensorBoard and, for scripts (results/compare), one JSON object per
  // step and per evaluation to metrics.jsonl (appended to on resume; the last line of a step wins).
  std::optional<TensorBoardWriter> tensorboard;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics_log(nullptr, &std::fclose);
  if (ranks.root()) {
    tensorboard.emplace(options.output_dir + "/tensorboard");
    const std::string path = options.output_dir + "/metrics.jsonl";
    metrics_log.reset(std::fopen(path.c_str(), "a"));
    if (!metrics_log) throw InputError(describe(path, "", std::string("cannot open for appending: ") + std::strerror(errno)));
  }
  auto scalar = [&](const std::string& tag, double value, int64_t step) {
    if (tensorboard) tensorboard->add_scalar(tag, value, step);
  };
  auto log_metrics = [&](const nlohmann::ordered_json& line) {
    if (!metrics_log) return;
    const std::string text = line.dump() + "\n";
    if (std::fwrite(text.data(), 1, text.size(), metrics_log.get()) != text.size() || std::fflush(metrics_log.get()) != 0)
      throw InputError(describe(options.output_dir + "/metrics.jsonl", "", std::string("write failed: ") + std::strerror(errno)));
  };
  // Evaluation at a step (every rank takes part): metrics into TensorBoard, prediction files into
  // the run directory, and the best F1 into the trainer state (so checkpoints carry it).
  std::optional<FeatureStore> eval_store;
  std::optional<EvalResult> last_eval;
  int64_t last_eval_step = -1;
  double eval_seconds = 0;
  auto run_evaluation = [&] {
    const auto t = Clock::now();
    if (!eval_store) agree_on(ranks, [&] { eval_store = FeatureStore::open(options.eval_dir); });
    last_eval = evaluate(model, *eval_store, options.output_dir, options.eval_batch_size, options.postprocess);
    last_eval_step = state.global_step;
    eval_seconds += seconds_since(t);
    scalar("eval/loss", last_eval->loss, state.global_step);
    nlohmann::ordered_json line = {{"step", state.global_step}, {"eval_loss", last_eval->loss}};
    for (const auto& [key, value] : last_eval->metrics.items()) line["eval_" + key] = value;
    log_metrics(line);
    for (const char* key : {"exact_match", "exact", "f1", "best_f1"})
      if (last_eval->metrics.contains(key)) scalar(std::string("eval/") + key, last_eval->metrics[key].get<double>(), state.global_step);
    const double f1 = last_eval->metrics["f1"].get<double>();
    if (!state.best_metric || f1 > *state.best_metric) {
      state.best_metric = f1;
      state.best_step = state.global_step;
    }
    spdlog::info("eval at step {}: {} loss {:.4f}", state.global_step, last_eval->metrics.dump(), last_eval->loss);
  };
  const std::string trace = ranks.size > 1 ? "trace-rank" + std::to_string(ranks.rank) + ".json" : "trace.json";
  StepProfiler profiler(options.profile ? options.output_dir + "/profile/" + trace : "", options.profile_schedule);
  StopSignals stop_signals;
  PhaseTimes phases;
  int64_t steps_this_run = 0;
  double samples_this_run = 0, step_seconds = 0;
  const auto loop_start = Clock::now();
  bool stopped_early = false, preempted = false;
  while (state.global_step < total_steps && !stopped_early) {
    const std::vector<int64_t> order = sampler.indices(state.epoch);
    while (state.micro_batches_done + options.gradient_accumulation <= steps_per_epoch * options.gradient_accumulation &&
           state.global_step < total_steps) {
      inject_faults(ranks, state.global_step);
      profiler.before_step(steps_this_run);
      const auto step_start = Clock::now();
      double step_loss = 0, step_samples = 0;
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
          // Gradients are reduced across ranks during the last micro-batch's backward only.
          parallel.begin_backward(micro + 1 == options.gradient_accumulation);
          loss.backward();
        }
        phases.backward += seconds_since(t);
        step_loss += loss.item<double>();
        step_samples += static_cast<double>(indices.size());
      }
      auto t = Clock::now();
      {
        MPIBERT_PROFILE_RANGE("mpibert::gradient_sync");
        parallel.finish_gradient_sync();
      }
      phases.gradient_sync += seconds_since(t);
      t = Clock::now();
      double grad_norm = 0;
      const double lr = schedule.lr(state.global_step);
      {
        MPIBERT_PROFILE_RANGE("mpibert::optimizer");
        grad_norm = parallel.clip_and_step(options.max_grad_norm, lr);
        parallel.zero_grad();
      }
      phases.optimizer += seconds_since(t);
      profiler.after_step(steps_this_run);
      ++state.global_step;
      ++steps_this_run;
      // One small all-reduce a step: the global loss and sample count, and whether a rank was
      // asked to stop (signals reach ranks at different moments; all stop at the same step).
      const std::vector<double> totals =
          sum_across(ranks, {step_loss, step_samples, stop_signal != 0 ? 1.0 : 0.0}, "the step's loss and sample count");
      step_loss = totals[0] / ranks.size;
      samples_this_run += totals[1];
      preempted = totals[2] > 0;
      state.loss_history.emplace_back(state.global_step, step_loss);

      const double step_time = seconds_since(step_start);
      step_seconds += step_time;
      const double samples_per_second = samples_this_run / seconds_since(loop_start);
      scalar("train/loss", step_loss, state.global_step);
      scalar("train/learning_rate", lr, state.global_step);
      scalar("train/grad_norm", grad_norm, state.global_step);
      scalar("train/samples_per_second", samples_per_second, state.global_step);
      scalar("train/step_time", step_time, state.global_step);
      log_metrics({{"step", state.global_step},
                   {"epoch", static_cast<double>(state.global_step) / static_cast<double>(steps_per_epoch)},
                   {"loss", step_loss},
                   {"learning_rate", lr},
                   {"grad_norm", grad_norm},
                   {"samples_per_second", samples_per_second},
                   {"step_time", step_time},
                   {"seconds", seconds_since(run_start)}});
      if (options.logging_steps > 0 && (state.global_step % options.logging_steps == 0 || state.global_step == total_steps)) {
        const double eta = seconds_since(loop_start) / static_cast<double>(steps_this_run) * static_cast<double>(total_steps - state.global_step);
        spdlog::info("step {}/{} epoch {:.2f} loss {:.4f} lr {:.3e} grad_norm {:.3f} samples/s {:.1f} ETA {}", state.global_step,
                     total_steps, static_cast<double>(state.global_step) / static_cast<double>(steps_per_epoch), step_loss, lr,
                     grad_norm, samples_per_second, format_duration(eta));
        if (tensorboard) tensorboard->flush();
      }
      if (!options.eval_dir.empty() && options.eval_steps > 0 && state.global_step % options.eval_steps == 0) run_evaluation();
      const bool stop_now = state.global_step < total_steps &&
                            (preempted || (options.stop_after_steps > 0 && steps_this_run == options.stop_after_steps));
      if ((options.save_steps > 0 && state.global_step % options.save_steps == 0) || stop_now)
        save_checkpoint(options, ranks, model, parallel, state);
      if (stop_now) {
        if (preempted) {
          spdlog::warn("stopping at step {} on a signal ({}); checkpointed, resume with --resume auto", state.global_step,
                       stop_signal == SIGUSR1 ? "SIGUSR1" : stop_signal == SIGTERM ? "SIGTERM" : "on another rank");
        } else {
          spdlog::info("stopping after {} steps as asked; resume with --resume auto", steps_this_run);
        }
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
  if (!stopped_early) save_checkpoint(options, ranks, model, parallel, state);

  double loss_sum = 0;
  for (const auto& [step, loss] : state.loss_history) loss_sum += loss;
  nlohmann::ordered_json results = {
      {"train_runtime", train_runtime},
      {"train_samples", store.num_features()},
      {"train_samples_per_second", samples_this_run / train_runtime},
      {"train_steps_per_second", static_cast<double>(steps_this_run) / train_runtime},
      // The steps alone (no setup, evaluation or checkpoints): what speedups compare.
      {"train_step_seconds", step_seconds},
      {"train_step_samples_per_second", step_seconds > 0 ? samples_this_run / step_seconds : 0.0},
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
  if (tensorboard) tensorboard->flush();
  results["stopped_early"] = stopped_early;
  results["preempted"] = preempted && stopped_early;
  results["global_step"] = state.global_step;
  results["resumed_from_step"] = resumed_from_step;
  // The slowest rank's time in each phase: the one the others waited for.
  std::vector<double> phase_seconds = phases.values();
  if (ranks.size > 1) phase_seconds = max_over_ranks(phase_seconds, "the phase times");
  results["phase_seconds"] = PhaseTimes::to_json(phase_seconds);
  const SyncStats sync = parallel.sync_stats();
  const std::vector<double> sync_totals = sum_across(
      ranks, {sync.busy_seconds, sync.exposed_seconds, sync.exposed_transfer_seconds}, "the communication times");
  SyncStats job_sync;
  job_sync.busy_seconds = sync_totals[0];
  job_sync.exposed_seconds = sync_totals[1];
  job_sync.exposed_transfer_seconds = sync_totals[2];
  results["parallel"] = {{"world_size", ranks.size},
                         {"strategy", state.strategy},
                         {"communication", communicator ? communicator->backend() : "none"},
                         {"gradient_buckets", parallel.num_buckets()},
                         {"bucket_mb", options.parallel.bucket_mb},
                         {"gradient_bytes_reduced_per_rank", sync.bytes},
                         {"gradient_transfer_seconds_mean", job_sync.busy_seconds / ranks.size},
                         {"gradient_transfer_after_backward_seconds_mean", job_sync.exposed_transfer_seconds / ranks.size},
                         {"hidden_transfer_fraction", job_sync.hidden_fraction()},
                         {"wait_after_backward_seconds_mean", job_sync.exposed_seconds / ranks.size},
                         {"optimizer_state_bytes_per_rank", parallel.optimizer_state_bytes()}};
  results["environment"] = environment(ranks.size, communicator ? communicator->backend() : "none");
  results["parameters"] = {{"epochs", options.epochs},
                           {"max_steps", options.max_steps},
                           {"batch_size", options.batch_size},
                           {"gradient_accumulation", options.gradient_accumulation},
                           {"global_batch_size", global_batch},
                           {"learning_rate", options.learning_rate},
                           {"weight_decay", options.weight_decay},
                           {"warmup_steps", warmup},
                           {"max_grad_norm", options.max_grad_norm},
                           {"seed", options.seed},
                           {"padding", options.padding == Padding::kDynamic ? "dynamic" : "full"},
                           {"group_by_length", options.group_by_length},
                           {"total_steps", total_steps},
                           {"model", model->config().to_json()}};
  if (ranks.root()) write_file_atomic(options.output_dir + "/results.json", results.dump(2) + "\n");
  return results;
}

}  // namespace mpibert
