// The training loop end to end on a tiny model: results and files a user reads, and a resumed run
// that ends bit for bit where an uninterrupted one does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "encoder_families.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/model/hf_model_dir.hpp"
#include "mpibert/model/model_registry.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "mpibert/optim/lr_schedule.hpp"
#include "mpibert/train/run_log.hpp"
#include "mpibert/train/tensorboard.hpp"
#include "mpibert/train/trainer.hpp"
#include "mpibert/train/training_checkpoint.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

namespace fs = std::filesystem;

// Every value a step keeps for the log lives on the log's device (the parameters'): the flush reads
// them all with one stack and copy, which refuses two devices. A value elsewhere (an fp16 step's
// NaN norm once made on the CPU beside CUDA losses) is refused at the step that made it; here the
// meta device stands in for the second device a CPU-only machine lacks.
TEST(RunLog, StepValuesOffTheLogsDeviceAreRefusedAtTheStep) {
  test::TempDir run;
  RunLog log(run.path(), /*writer=*/true, /*world_size=*/1, Trackers{}, torch::kCPU);
  auto step = [](int64_t number, const torch::Device& norm_device, float norm) {
    StepRecord record;
    record.step = number;
    record.losses = {torch::full({}, 1.5f), torch::full({}, 0.5f)};
    record.grad_norm = torch::full({}, norm, torch::TensorOptions().device(norm_device));
    return record;
  };
  auto refusal = [&](StepRecord record) -> std::string {
    try {
      log.add_step(std::move(record), 0.1, 10);
    } catch (const std::logic_error& error) {
      return error.what();
    }
    return "<no error>";
  };
  const std::string error = refusal(step(1, torch::kMeta, 2.0f));
  EXPECT_NE(error.find("step 1: its grad_norm is on meta, the run's values on cpu"), std::string::npos) << error;
  StepRecord no_norm = step(2, torch::kCPU, 2.0f);
  no_norm.grad_norm = torch::Tensor();
  EXPECT_NE(refusal(no_norm).find("its grad_norm is missing"), std::string::npos);
  StepRecord meta_loss = step(3, torch::kCPU, 2.0f);
  meta_loss.losses[1] = meta_loss.losses[1].to(torch::kMeta);
  EXPECT_NE(refusal(meta_loss).find("its loss of micro-batch 1 is on meta"), std::string::npos);
  // A skipped step's NaN norm beside a normal step's, both on the log's device: one flush reads both.
  log.add_step(step(4, torch::kCPU, std::numeric_limits<float>::quiet_NaN()), 0.1, 10);
  log.add_step(step(5, torch::kCPU, 3.0f), 0.1, 10);
  const std::vector<LoggedStep> logged = log.flush_steps();
  ASSERT_EQ(logged.size(), 2u);
  EXPECT_TRUE(std::isnan(logged[0].grad_norm));
  EXPECT_EQ(logged[1].grad_norm, 3.0);
  EXPECT_EQ(logged[1].loss, 2.0);
}

class Trainer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    test::prepare_shards(data_->file("train"), test::squad_v1_path(), 0, 40, "train");
    test::prepare_shards(data_->file("eval"), test::squad_v1_path(), 40, 16, "eval");
    // The fixture's tiny BERT, with dropout on so that resuming must restore the RNG.
    auto config = nlohmann::json::parse(read_file(test::fixtures_dir() + "/model/config.json"));
    config["hidden_dropout_prob"] = 0.1;
    config["attention_probs_dropout_prob"] = 0.1;
    test::write_text(data_->file("config.json"), config.dump());
  }
  static void TearDownTestSuite() { delete data_; }

  TrainOptions options(const std::string& output_dir) const {
    TrainOptions o;
    o.train_dir = data_->file("train");
    o.eval_dir = data_->file("eval");
    o.output_dir = output_dir;
    o.model_config = data_->file("config.json");
    o.tokenizer = test::vocab_path();
    o.epochs = 2;
    o.batch_size = 8;
    o.learning_rate = 1e-3;
    o.warmup_ratio = 0.2;
    o.logging_steps = 0;
    return o;
  }

  // Whole epochs see every feature equally often: the model FLOPs per sample are the features'
  // mean on their real lengths (QuestionAnsweringModel::training_flops); MFU is the achieved rate over the measured one.
  void expect_utilization_of_whole_epochs(const nlohmann::ordered_json& results) const {
    const FeatureStore store = FeatureStore::open(data_->file("train"));
    const TrainingFlops flops = make_qa_model_from_file(data_->file("config.json"), {})->training_flops();
    double mean = 0;
    for (int64_t f = 0; f < store.num_features(); ++f) {
      const int64_t length = store.feature(f).length;
      mean += flops.of(length, length * length) / static_cast<double>(store.num_features());
    }
    const auto& utilization = results["utilization"];
    const double per_sample = utilization["model_flops_per_sample"], achieved = utilization["model_flops_per_second"];
    const double matmul_rate = utilization["matmul_flops_per_second"];
    EXPECT_NEAR(per_sample, mean, 1e-9 * mean);
    EXPECT_NEAR(achieved, per_sample * results["train_step_samples_per_second"].get<double>(), 1e-9 * achieved);
    EXPECT_GT(matmul_rate, 1e8);  // any CPU of this century
    EXPECT_EQ(utilization["matmul_dtype"], "float32");
    EXPECT_DOUBLE_EQ(utilization["mfu"].get<double>(), achieved / matmul_rate);
  }

  static test::TempDir* data_;
};
test::TempDir* Trainer::data_ = nullptr;

TEST_F(Trainer, WritesResultsCheckpointsPredictionsAndTensorBoard) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.save_steps = 3;
  o.save_total_limit = 2;
  o.eval_steps = 4;
  nlohmann::ordered_json results = train(o);
  for (const char* key : {"train_runtime", "train_samples", "train_samples_per_second", "train_steps_per_second", "train_loss",
                          "epoch", "eval_exact_match", "eval_f1", "eval_loss", "eval_runtime", "eval_samples",
                          "eval_samples_per_second", "phase_seconds", "environment", "parameters"})
    EXPECT_TRUE(results.contains(key)) << key;
  EXPECT_EQ(results["epoch"], 2.0);
  expect_utilization_of_whole_epochs(results);
  const int64_t steps = results["global_step"];
  // The steady rate counts the steps after the warm-up ones, when the run has any.
  ASSERT_EQ(results["steady_after_steps"], 10);
  const double steady = results["train_steady_samples_per_second"];
  EXPECT_EQ(steady > 0, steps > 10) << steps << " steps, steady " << steady;
  if (steps > 10) {
    EXPECT_GT(results["utilization"]["steady_mfu"].get<double>(), 0);
  }
  EXPECT_EQ(results, nlohmann::ordered_json::parse(read_file(run.file("results.json"))));
  EXPECT_EQ(results["environment"]["devices"]["type"], torch::cuda::is_available() ? "cuda" : "cpu");  // --device auto
  EXPECT_TRUE(fs::exists(run.file("predictions.json")));
  EXPECT_TRUE(fs::exists(run.file("nbest_predictions.json")));
  // Every 3 steps plus the end, only the last 2 kept; each an HF directory plus the trainer state.
  std::vector<std::string> checkpoints;
  for (const auto& name : run.entries())
    if (name.rfind("checkpoint-", 0) == 0) checkpoints.push_back(name);
  ASSERT_EQ(checkpoints.size(), 2u);
  EXPECT_EQ(test::TempDir::entries_of(run.file("checkpoint-" + std::to_string(steps))),
            (std::vector<std::string>{"checksums.json", "config.json", "model.safetensors", "optimizer.safetensors",
                                      "rank-0.safetensors", "tokenizer_config.json", "trainer_state.json", "vocab.txt"}));
  const std::string events = run.file("tensorboard/" + test::TempDir::entries_of(run.file("tensorboard")).front());
  std::map<std::string, int> counts;
  for (const auto& scalar : read_tensorboard_scalars(events)) ++counts[scalar.tag];
  EXPECT_EQ(counts["train/loss"], steps);
  EXPECT_EQ(counts["train/learning_rate"], steps);
  const int64_t evaluations = steps / 4 + (steps % 4 != 0);  // every 4 steps and at the end
  EXPECT_EQ(counts["eval/f1"], evaluations);
  EXPECT_EQ(counts["eval/exact_match"], evaluations);
  // metrics.jsonl: a line per step and one per evaluation, matching the TensorBoard scalars.
  // An evaluation's line carries the epochs done at its step, as that step's training line does.
  int train_lines = 0, eval_lines = 0;
  std::map<int64_t, double> epoch_at_step;
  for (const auto& line : test::read_lines(run.file("metrics.jsonl"))) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("loss")) {
      ++train_lines;
      EXPECT_EQ(record["step"], train_lines);
      epoch_at_step[record["step"].get<int64_t>()] = record["epoch"].get<double>();
    }
    if (record.contains("eval_f1")) {
      ++eval_lines;
      ASSERT_TRUE(record.contains("epoch")) << line;
      EXPECT_DOUBLE_EQ(record["epoch"].get<double>(), epoch_at_step.at(record["step"].get<int64_t>())) << line;
    }
  }
  EXPECT_EQ(train_lines, steps);
  EXPECT_EQ(eval_lines, evaluations);
  const auto state = nlohmann::json::parse(read_file(run.file("checkpoint-" + std::to_string(steps) + "/trainer_state.json")));
  EXPECT_EQ(state["best_metric"].get<double>(), results["best_eval_f1"].get<double>());
  EXPECT_GE(results["best_eval_f1"].get<double>(), results["eval_f1"].get<double>());
}

// The keys of a JSON object, sorted.
std::set<std::string> keys_of(const nlohmann::json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

bool contains_all(const std::set<std::string>& have, const std::set<std::string>& want) {
  return std::includes(have.begin(), have.end(), want.begin(), want.end());
}

// The run directory carries HF Trainer's files where run_qa.py users look for them, with the keys
// the real Trainer writes (tests/peer_runs/hf-trainer, made by transformers 4.57's Trainer).
TEST_F(Trainer, RunDirectoryCarriesHfTrainersFilesAndNames) {
  const std::string hf = test::peer_runs_dir() + "/hf-trainer";
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.logging_steps = 2;
  o.eval_steps = 4;
  o.save_steps = 3;
  const nlohmann::json results = nlohmann::json::parse(train(o).dump());  // HF's files are unordered json
  const int64_t steps = results["global_step"];

  for (const char* name : {"all_results.json", "train_results.json", "eval_results.json"}) {
    const auto ours = nlohmann::json::parse(read_file(run.file(name)));
    const auto theirs = nlohmann::json::parse(read_file(hf + "/" + name));
    EXPECT_TRUE(contains_all(keys_of(ours), keys_of(theirs))) << name << ": " << ours.dump() << "\nHF: " << theirs.dump();
    for (const auto& [key, value] : ours.items()) EXPECT_EQ(value, results.at(key)) << name << " " << key;
    EXPECT_EQ(read_file(run.file(name)), ours.dump(4) + "\n") << name << " is written as HF writes it (sorted, indent 4)";
  }
  const auto state = nlohmann::json::parse(read_file(run.file("trainer_state.json")));
  const auto hf_state = nlohmann::json::parse(read_file(hf + "/trainer_state.json"));
  EXPECT_EQ(keys_of(state), keys_of(hf_state));
  EXPECT_EQ(state["global_step"], steps);
  EXPECT_EQ(state["logging_steps"], 2);
  EXPECT_EQ(state["train_batch_size"], 8);
  EXPECT_EQ(state["best_metric"], results["best_eval_f1"]);
  EXPECT_GT(state["total_flos"].get<double>(), 0.0);
  EXPECT_EQ(state["total_flos"], results["total_flos"]);

  // log_history: HF's entries, with HF's keys, and the loss averaged over each logging interval.
  std::map<int64_t, double> step_losses;
  for (const auto& line : test::read_lines(run.file("metrics.jsonl"))) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("loss")) step_losses[record["step"]] = record["loss"];
  }
  const auto& hf_history = hf_state["log_history"];
  const auto& history = state["log_history"];
  int logged = 0, evaluations = 0;
  for (const auto& entry : history) {
    if (entry.contains("loss")) {
      EXPECT_EQ(keys_of(entry), keys_of(hf_history.front())) << entry.dump();
      const int64_t step = entry["step"];
      EXPECT_EQ(step % 2, 0);
      EXPECT_NEAR(entry["loss"].get<double>(), (step_losses[step - 1] + step_losses[step]) / 2, 5e-5) << step;
      ++logged;
    } else if (entry.contains("eval_f1")) {
      auto want = keys_of(nlohmann::json::parse(read_file(hf + "/eval_results.json")));
      want.erase("eval_samples");
      want.insert("step");
      EXPECT_TRUE(contains_all(keys_of(entry), want)) << entry.dump();
      ++evaluations;
    } else {
      EXPECT_EQ(keys_of(entry), keys_of(hf_history.back())) << entry.dump();  // the training summary
      EXPECT_EQ(entry["train_loss"], results["train_loss"]);
    }
  }
  EXPECT_EQ(logged, steps / 2);
  EXPECT_EQ(evaluations, steps / 4 + (steps % 4 != 0));
  EXPECT_TRUE(history.back().contains("eval_f1")) << "the evaluation after training comes last";

  // run_qa's prediction names lead to the files, and the run directory is the final model.
  EXPECT_TRUE(fs::is_symlink(run.file("eval_predictions.json")));
  EXPECT_EQ(read_file(run.file("eval_predictions.json")), read_file(run.file("predictions.json")));
  EXPECT_EQ(read_file(run.file("eval_nbest_predictions.json")), read_file(run.file("nbest_predictions.json")));
  const std::string final_checkpoint = run.file("checkpoint-" + std::to_string(steps));
  for (const char* name : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"})
    EXPECT_EQ(read_file_bytes(run.file(name)), read_file_bytes(final_checkpoint + "/" + name)) << name;
  EXPECT_NO_THROW(load_pretrained(run.path(), test::vocab_path()));  // `mpibert eval --model RUN` reads it
}

TEST_F(Trainer, ResumedRunEndsBitForBitWhereAnUninterruptedOneDoes) {
  test::TempDir straight, interrupted;
  TrainOptions o = options(straight.path());
  o.eval_dir.clear();
  o.logging_steps = 2;
  const nlohmann::ordered_json full = train(o);

  TrainOptions first = options(interrupted.path());
  first.eval_dir.clear();
  first.logging_steps = 2;
  first.stop_after_steps = 4;  // mid-epoch: 40 questions give 6 batches of 8 per epoch
  const nlohmann::ordered_json stopped = train(first);
  EXPECT_EQ(stopped["stopped_early"], true);
  EXPECT_EQ(stopped["global_step"], 4);
  TrainOptions second = first;
  second.stop_after_steps = 0;
  second.resume = "auto";
  const nlohmann::ordered_json resumed = train(second);
  EXPECT_EQ(resumed["global_step"], full["global_step"]);
  EXPECT_EQ(resumed["resumed_from_step"], 4);

  const std::string name = "checkpoint-" + std::to_string(full["global_step"].get<int64_t>());
  SafetensorsFile a = SafetensorsFile::open(straight.file(name + "/model.safetensors"));
  SafetensorsFile b = SafetensorsFile::open(interrupted.file(name + "/model.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i)
    EXPECT_TRUE(torch::equal(a.tensors()[i].tensor, b.tensors()[i].tensor)) << a.tensors()[i].name;
  // The loss history is continuous too, and so is HF's log history (the timings of the summary aside).
  EXPECT_EQ(nlohmann::json::parse(read_file(straight.file(name + "/trainer_state.json")))["loss_history"],
            nlohmann::json::parse(read_file(interrupted.file(name + "/trainer_state.json")))["loss_history"]);
  auto history = [](const std::string& run_dir) {
    nlohmann::json entries = nlohmann::json::parse(read_file(run_dir + "/trainer_state.json"))["log_history"];
    for (const char* timing : {"train_runtime", "train_samples_per_second", "train_steps_per_second"})
      entries.back().erase(timing);
    return entries;
  };
  EXPECT_EQ(history(straight.path()), history(interrupted.path()));
  EXPECT_EQ(full["total_flos"], resumed["total_flos"]);
}

// A run that reached --max-steps inside an epoch resumes there, with a longer --max-steps, as HF's
// Trainer does: bit for bit the straight run to the longer length (a constant lr, so that the
// schedule does not depend on the length). Before, its epoch was counted as done and the rest of it
// was never seen.
TEST_F(Trainer, ARunStoppedByMaxStepsResumesInsideItsEpoch) {
  test::TempDir straight, interrupted;
  auto with_length = [&](const std::string& dir, int64_t steps) {
    TrainOptions o = options(dir);
    o.eval_dir.clear();
    o.lr_scheduler_type = LrSchedulerType::kConstant;
    o.warmup_ratio = 0;
    o.max_steps = steps;
    return o;
  };
  train(with_length(straight.path(), 8));
  train(with_length(interrupted.path(), 3));  // 3 of the epoch's 6 steps
  const nlohmann::json state = nlohmann::json::parse(read_file(interrupted.file("checkpoint-3/trainer_state.json")));
  EXPECT_EQ(state["epoch"], 0);
  EXPECT_EQ(state["micro_batches_done_in_epoch"], 3);
  TrainOptions longer = with_length(interrupted.path(), 8);
  longer.resume = "auto";
  const nlohmann::ordered_json resumed = train(longer);
  EXPECT_EQ(resumed["resumed_from_step"], 3);
  SafetensorsFile a = SafetensorsFile::open(straight.file("checkpoint-8/model.safetensors"));
  SafetensorsFile b = SafetensorsFile::open(interrupted.file("checkpoint-8/model.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i)
    EXPECT_TRUE(torch::equal(a.tensors()[i].tensor, b.tensors()[i].tensor)) << a.tensors()[i].name;
}

// A schedule other than linear (HF's cosine_with_restarts, 2 cycles after 2 warmup steps): every
// step's lr is the schedule's, stopped at step 3 and resumed as in one run; results.json and the
// checkpoints record it, and a checkpoint is not resumed with another schedule.
TEST_F(Trainer, ScheduleContinuesAcrossAResumeAndAnotherIsRefused) {
  test::TempDir straight, interrupted;
  auto with_schedule = [&](const std::string& output_dir) {
    TrainOptions o = options(output_dir);
    o.eval_dir.clear();
    o.max_steps = 7;
    o.warmup_steps = 2;
    o.logging_steps = 1;
    o.lr_scheduler_type = LrSchedulerType::kCosineWithRestarts;
    o.lr_scheduler_kwargs = R"({"num_cycles": 2})";
    return o;
  };
  const nlohmann::ordered_json full = train(with_schedule(straight.path()));
  TrainOptions first = with_schedule(interrupted.path());
  first.stop_after_steps = 3;
  train(first);
  TrainOptions second = first;
  second.stop_after_steps = 0;
  second.resume = "auto";
  EXPECT_EQ(train(second)["resumed_from_step"], 3);

  const LrSchedule schedule(parse_lr_scheduler_kwargs(first.lr_scheduler_type, first.lr_scheduler_kwargs), first.learning_rate, 2,
                            7);
  std::vector<double> expected;
  for (int64_t step = 0; step < 7; ++step) expected.push_back(schedule.lr(step));
  auto logged_lrs = [](const std::string& run_dir) {
    std::vector<double> lrs;
    for (const std::string& line : test::read_lines(run_dir + "/metrics.jsonl"))
      lrs.push_back(nlohmann::json::parse(line).at("learning_rate").get<double>());
    return lrs;
  };
  EXPECT_EQ(logged_lrs(straight.path()), expected);
  EXPECT_EQ(logged_lrs(interrupted.path()), expected);
  SafetensorsFile a = SafetensorsFile::open(straight.file("checkpoint-7/model.safetensors"));
  SafetensorsFile b = SafetensorsFile::open(interrupted.file("checkpoint-7/model.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i)
    EXPECT_TRUE(torch::equal(a.tensors()[i].tensor, b.tensors()[i].tensor)) << a.tensors()[i].name;

  EXPECT_EQ(full["parameters"]["lr_scheduler_type"], "cosine_with_restarts");
  EXPECT_EQ(full["parameters"]["lr_scheduler_kwargs"].dump(), R"({"num_cycles":2.0})");
  const auto state = nlohmann::json::parse(read_file(interrupted.file("checkpoint-3/trainer_state.json")));
  EXPECT_EQ(state["lr_scheduler"].dump(),
            R"({"lr_scheduler_kwargs":{"num_cycles":2.0},"lr_scheduler_type":"cosine_with_restarts"})");

  TrainOptions other = second;
  other.max_steps = 9;
  other.lr_scheduler_type = LrSchedulerType::kCosine;
  other.lr_scheduler_kwargs.clear();
  const std::string error = test::error_of([&] { train(other); });
  EXPECT_NE(error.find(interrupted.file("checkpoint-7") +
                       "/trainer_state.json: lr_scheduler: written by a run with --lr-scheduler-type cosine_with_restarts "
                       "--lr-scheduler-kwargs '{\"num_cycles\":2.0}', this run asks for --lr-scheduler-type cosine "
                       "--lr-scheduler-kwargs '{\"num_cycles\":0.5}'"),
            std::string::npos)
      << error;
  other.lr_scheduler_type = LrSchedulerType::kCosineWithRestarts;
  other.lr_scheduler_kwargs = R"({"num_cycles": 2.0})";  // the same schedule, spelled otherwise: it continues
  EXPECT_EQ(train(other)["global_step"], 9);
}

// --gradient-checkpointing reaches the model (the trace shows the checkpointed layers' backward) and
// results.json's parameters, and the run ends bit for bit where the run without it ends (dropout on:
// the recompute replays the masks), loss history and weights alike.
TEST_F(Trainer, GradientCheckpointingEndsWhereTheRunWithoutItEnds) {
  test::TempDir plain_run, checkpointed_run;
  TrainOptions plain = options(plain_run.path()), checkpointed = options(checkpointed_run.path());
  for (TrainOptions* o : {&plain, &checkpointed}) {
    o->eval_dir.clear();
    o->max_steps = 3;
    o->logging_steps = 1;
  }
  checkpointed.model.gradient_checkpointing = true;
  checkpointed.profile = true;
  checkpointed.profile_schedule = {1, 1, 1};
  const nlohmann::ordered_json without = train(plain), with = train(checkpointed);
  EXPECT_EQ(without["parameters"]["gradient_checkpointing"], false);
  EXPECT_EQ(with["parameters"]["gradient_checkpointing"], true);
  const std::string trace = read_file(checkpointed_run.file("profile/trace.json"));
  EXPECT_NE(trace.find("CheckpointedLayer"), std::string::npos);

  const std::string name = "checkpoint-3/";
  EXPECT_EQ(nlohmann::json::parse(read_file(plain_run.file(name + "trainer_state.json")))["loss_history"],
            nlohmann::json::parse(read_file(checkpointed_run.file(name + "trainer_state.json")))["loss_history"]);
  SafetensorsFile a = SafetensorsFile::open(plain_run.file(name + "model.safetensors"));
  SafetensorsFile b = SafetensorsFile::open(checkpointed_run.file(name + "model.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i)
    EXPECT_TRUE(torch::equal(a.tensors()[i].tensor, b.tensors()[i].tensor)) << a.tensors()[i].name;
}

// The user's path: a config file for `mpibert train`, then `mpibert eval` and `mpibert predict` on
// the checkpoint it wrote.
TEST_F(Trainer, CommandLineTrainEvalAndPredict) {
  test::TempDir run;
  test::write_text(run.file("run.toml"), "[train]\nmodel-config = \"" + data_->file("config.json") + "\"\nvocab = \"" +
                                             test::vocab_path() + "\"\nepochs = 1\nbatch-size = 16\nlearning-rate = 0.002\n");
  const std::string mpibert = test::bin_dir() + "/mpibert ";
  test::CommandResult trained =
      test::run_command(mpibert + "train --config " + run.file("run.toml") + " --train-shards " + data_->file("train") +
                        " --eval-shards " + data_->file("eval") + " --output-dir " + run.file("out") + " --batch-size 8");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  EXPECT_NE(trained.output.find("eval_f1 = "), std::string::npos) << trained.output;
  const std::string resolved = read_file(run.file("out/train_config.toml"));
  EXPECT_NE(resolved.find("batch-size=8"), std::string::npos) << resolved;         // the command line wins
  EXPECT_NE(resolved.find("learning-rate=0.002"), std::string::npos) << resolved;  // the file fills the rest
  const auto results = nlohmann::json::parse(read_file(run.file("out/results.json")));
  EXPECT_EQ(results["parameters"]["batch_size"], 8);

  const std::string checkpoint = run.file("out/checkpoint-" + std::to_string(results["global_step"].get<int64_t>()));
  test::CommandResult evaluated = test::run_command(mpibert + "eval --model " + checkpoint + " --data " + data_->file("eval") +
                                                    " --output-dir " + run.file("eval"));
  ASSERT_EQ(evaluated.exit_status, 0) << evaluated.output;
  const auto metrics = nlohmann::json::parse(read_file(run.file("eval/eval_results.json")));
  EXPECT_DOUBLE_EQ(metrics["eval_f1"].get<double>(), results["eval_f1"].get<double>());  // same model, same numbers

  const std::string context = "The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50.";
  test::CommandResult predicted = test::run_command(mpibert + "predict --model " + checkpoint + " --context '" + context +
                                                    "' --question 'Who won Super Bowl 50?' 2>/dev/null");
  ASSERT_EQ(predicted.exit_status, 0) << predicted.output;
  const auto answer = nlohmann::json::parse(predicted.output);
  const int64_t begin = answer["start"], end = answer["end"];
  ASSERT_LT(begin, end);
  EXPECT_EQ(answer["answer"], context.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));

  // A file of questions (the same one twice): each answered as the lone --question is, in order,
  // named by its id or its line.
  test::write_text(run.file("questions.jsonl"), "{\"id\": \"q1\", \"question\": \"Who won Super Bowl 50?\", \"context\": \"" +
                                                    context +
                                                    "\", \"answers\": {\"text\": [], \"answer_start\": []}}\n\n"
                                                    "{\"question\": \"Who won Super Bowl 50?\", \"context\": \"" +
                                                    context + "\"}\n");
  test::CommandResult many = test::run_command(mpibert + "predict --model " + checkpoint + " --questions " +
                                               run.file("questions.jsonl") + " 2>/dev/null");
  ASSERT_EQ(many.exit_status, 0) << many.output;
  std::istringstream lines(many.output);
  std::vector<nlohmann::json> answers;
  for (std::string line; std::getline(lines, line);) answers.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(answers.size(), 2u) << many.output;
  EXPECT_EQ(answers[0]["id"], "q1");
  EXPECT_EQ(answers[1]["id"], "line 3");
  for (nlohmann::json& each : answers) {
    each.erase("id");
    EXPECT_EQ(each, answer) << "a question of the file is answered as the lone --question";
  }
  test::write_text(run.file("bad.jsonl"), "{\"question\": \"q\", \"context\": \"c\"}\n{\"question\": \"q\"}\n");
  test::CommandResult bad =
      test::run_command(mpibert + "predict --model " + checkpoint + " --questions " + run.file("bad.jsonl"));
  EXPECT_EQ(bad.exit_status, 1) << bad.output;
  EXPECT_NE(bad.output.find(run.file("bad.jsonl") + ": line 2: has no 'context'"), std::string::npos) << bad.output;
  test::CommandResult both = test::run_command(mpibert + "predict --model " + checkpoint + " --questions " +
                                               run.file("questions.jsonl") + " --question q --context c");
  EXPECT_NE(both.exit_status, 0) << both.output;
  EXPECT_NE(both.output.find("--context excludes --questions"), std::string::npos) << both.output;

  test::CommandResult environment = test::run_command(mpibert + "env --device cpu 2>/dev/null");
  ASSERT_EQ(environment.exit_status, 0) << environment.output;
  const auto described = nlohmann::json::parse(environment.output);
  EXPECT_EQ(described["devices"]["type"], "cpu");
  EXPECT_EQ(described["libtorch"], TORCH_VERSION);
}

// A run_qa.py command line runs with only the data paths changed: its option names are aliases,
// the vocabulary comes from the --model_name_or_path directory, and --max_seq_length/--doc_stride
// must be what the shards were prepared with.
TEST_F(Trainer, RunQaOptionNamesAreAccepted) {
  test::TempDir run;
  {
    BertForQuestionAnswering model(BertConfig::load(data_->file("config.json")));
    model->init_weights();
    save_pretrained(model, run.file("model"), test::vocab_path());
  }
  const std::string run_qa = test::bin_dir() + "/mpibert train --model_name_or_path " + run.file("model") +
                             " --do_train --do_eval --per_device_train_batch_size 8 --per_device_eval_batch_size 16"
                             " --learning_rate 3e-5 --num_train_epochs 1 --warmup_ratio 0.1 --weight_decay 0.01"
                             " --gradient_accumulation_steps 2 --seed 7 --save_steps 2 --logging_steps 1 --bf16"
                             " --train-shards " +
                             data_->file("train") + " --eval-shards " + data_->file("eval") + " --max-steps 2 --output_dir " +
                             run.file("out");
  test::CommandResult trained = test::run_command(run_qa + " --max_seq_length 384 --doc_stride 128");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  const std::string resolved = read_file(run.file("out/train_config.toml"));
  for (const char* value : {"batch-size=8", "eval-batch-size=16", "learning-rate=3e-5", "epochs=1", "warmup-ratio=0.1",
                            "weight-decay=0.01", "gradient-accumulation=2", "seed=7", "save-steps=2", "logging-steps=1",
                            "bf16=true", "max-seq-length=384", "doc-stride=128"})
    EXPECT_NE(resolved.find(value), std::string::npos) << value << " not in\n" << resolved;
  const auto results = nlohmann::json::parse(read_file(run.file("out/results.json")));
  EXPECT_EQ(results["parameters"]["batch_size"], 8);
  EXPECT_TRUE(results.contains("eval_f1"));

  test::CommandResult longer = test::run_command(run_qa + "-2 --max_seq_length 256");
  EXPECT_NE(longer.exit_status, 0);
  EXPECT_NE(longer.output.find(data_->file("train") + "/manifest.json: prepared with max_seq_length 384, but this run asks "
                                                      "for 256: prepare the shards again with mpibert-prep --max-seq-length 256"),
            std::string::npos)
      << longer.output;
  test::CommandResult stride = test::run_command(run_qa + "-3 --doc_stride 64");
  EXPECT_NE(stride.output.find("prepared with doc_stride 128, but this run asks for 64"), std::string::npos) << stride.output;
  test::CommandResult eval_without_shards =
      test::run_command(test::bin_dir() + "/mpibert train --model " + run.file("model") + " --do_eval --train-shards " +
                        data_->file("train") + " --output-dir " + run.file("out-4"));
  EXPECT_NE(eval_without_shards.output.find("--do_eval needs --eval-shards"), std::string::npos) << eval_without_shards.output;
}

// The command line of the question-answering README of HF's examples, with only the data changed
// (shards for --dataset_name, a local directory for the hub name) and --max_steps 2 to keep it
// short. TensorBoard's own reader finds the run's options as text and as hparams.
TEST_F(Trainer, RunQaReadmeCommandLineRunsWithOnlyTheDataChanged) {
  test::TempDir run;
  {
    BertForQuestionAnswering model(BertConfig::load(data_->file("config.json")));
    model->init_weights();
    save_pretrained(model, run.file("bert-base-uncased"), test::vocab_path());
  }
  const std::string readme_options =
      " --do_train --do_eval --per_device_train_batch_size 12 --learning_rate 3e-5 --num_train_epochs 2"
      " --max_seq_length 384 --doc_stride 128 --output_dir ";
  const std::string mpibert = test::bin_dir() + "/mpibert train --model_name_or_path " + run.file("bert-base-uncased");
  const test::CommandResult hub_data =
      test::run_command(mpibert + " --dataset_name squad" + readme_options + run.file("debug_squad/") + " 2>&1");
  EXPECT_EQ(hub_data.exit_status, 1) << hub_data.output;
  EXPECT_NE(hub_data.output.find("--dataset_name: squad: mpibert downloads no datasets (no network): prepare shards with "
                                 "mpibert-prep"),
            std::string::npos)
      << hub_data.output;
  EXPECT_FALSE(fs::exists(run.file("debug_squad")));

  const test::CommandResult trained =
      test::run_command(mpibert + " --train_shards " + data_->file("train") + " --eval_shards " + data_->file("eval") +
                        readme_options + run.file("debug_squad/") + " --max_steps 2 --threads 1 2>&1");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  const auto results = nlohmann::json::parse(read_file(run.file("debug_squad/results.json")));
  EXPECT_EQ(results["global_step"], 2);
  EXPECT_EQ(results["parameters"]["batch_size"], 12);
  EXPECT_EQ(results["parameters"]["learning_rate"], 3e-5);
  EXPECT_TRUE(results.contains("eval_f1"));

  const test::CommandResult read = test::run_command(std::string(MPIBERT_PYTHON) + " " + MPIBERT_TESTS_SOURCE_DIR +
                                                     "/read_tensorboard.py " + run.file("debug_squad/tensorboard"));
  ASSERT_EQ(read.exit_status, 0) << read.output;
  const auto events = nlohmann::json::parse(read.output);
  const std::vector<std::string> scalars = events["scalars"];
  EXPECT_NE(std::find(scalars.begin(), scalars.end(), "train/loss"), scalars.end()) << read.output;
  ASSERT_TRUE(events["text"].contains("args/text_summary")) << read.output;
  const auto args = nlohmann::json::parse(events["text"]["args/text_summary"][0].get<std::string>());
  EXPECT_EQ(args["batch_size"], 12);
  EXPECT_EQ(args["epochs"], 2.0);
  EXPECT_EQ(args["max_steps"], 2);
  EXPECT_EQ(args["eval_strategy"], "steps");
  const auto& hparams = events["hparams"];
  ASSERT_TRUE(hparams.is_object()) << "no hparams session start info: " << read.output;
  EXPECT_EQ(hparams["batch_size"], 12.0);
  EXPECT_DOUBLE_EQ(hparams["learning_rate"].get<double>(), 3e-5);
  EXPECT_EQ(hparams["lr_scheduler_type"], "linear");
  EXPECT_EQ(hparams["bf16"], false);
  EXPECT_EQ(hparams.size(), args.size()) << "every option in both";

  // --report_to none: no TensorBoard writer at all.
  const test::CommandResult quiet =
      test::run_command(mpibert + " --train_shards " + data_->file("train") + " --do_train --output_dir " + run.file("quiet") +
                        " --max_steps 1 --threads 1 --report_to none 2>&1");
  ASSERT_EQ(quiet.exit_status, 0) << quiet.output;
  EXPECT_TRUE(fs::exists(run.file("quiet/results.json")));
  EXPECT_FALSE(fs::exists(run.file("quiet/tensorboard")));
}

// --eval-strategy epoch / --save-strategy epoch (HF's): an evaluation and a checkpoint as each
// epoch ends, and none between; "no": none during training, the end's alone.
TEST_F(Trainer, EpochStrategiesEvaluateAndSaveAtEachEpochsEnd) {
  test::TempDir dir;
  TrainOptions o = options(dir.file("epoch"));
  o.eval_strategy = IntervalStrategy::kEpoch;
  o.save_strategy = IntervalStrategy::kEpoch;
  o.save_total_limit = 10;
  o.epochs = 3;
  const nlohmann::ordered_json results = train(o);
  const int64_t steps = results["global_step"], per_epoch = steps / 3;
  ASSERT_EQ(per_epoch * 3, steps);
  ASSERT_GT(per_epoch, 1);
  std::vector<int64_t> evaluated;
  for (const std::string& line : test::read_lines(o.output_dir + "/metrics.jsonl")) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("eval_f1")) evaluated.push_back(record["step"]);
  }
  EXPECT_EQ(evaluated, (std::vector<int64_t>{per_epoch, 2 * per_epoch, 3 * per_epoch}));
  for (int64_t step = 1; step <= steps; ++step)
    EXPECT_EQ(fs::exists(o.output_dir + "/checkpoint-" + std::to_string(step)), step % per_epoch == 0) << step;

  TrainOptions never = options(dir.file("no"));
  never.eval_strategy = IntervalStrategy::kNo;
  never.save_strategy = IntervalStrategy::kNo;
  never.epochs = 2;
  const int64_t never_steps = train(never)["global_step"];
  evaluated.clear();
  for (const std::string& line : test::read_lines(never.output_dir + "/metrics.jsonl")) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("eval_f1")) evaluated.push_back(record["step"]);
  }
  EXPECT_EQ(evaluated, std::vector<int64_t>{never_steps});
  for (int64_t step = 1; step < never_steps; ++step)
    EXPECT_FALSE(fs::exists(never.output_dir + "/checkpoint-" + std::to_string(step))) << step;
  EXPECT_TRUE(fs::exists(never.output_dir + "/checkpoint-" + std::to_string(never_steps)));
}

TEST_F(Trainer, ProfileWritesAChromeTraceWithOurPhases) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.eval_dir.clear();
  o.epochs = 1;
  o.profile = true;
  o.profile_schedule = {1, 1, 2};
  train(o);
  const auto trace = nlohmann::json::parse(read_file(run.file("profile/trace.json")));
  std::map<std::string, int> names;
  for (const auto& event : trace.at("traceEvents"))
    if (event.contains("name")) ++names[event["name"].get<std::string>()];
  EXPECT_EQ(names["mpibert::forward"], 2);  // the two active steps
  EXPECT_EQ(names["mpibert::optimizer"], 2);
  EXPECT_GT(names["aten::mm"] + names["aten::addmm"], 0);  // LibTorch's own operators are there too
}

// Two accumulated micro-batches of 4 make the same step as one batch of 8 (no dropout: the loss
// is a mean over the same 8 features either way), padded to full length or packed. Compared
// through the logged loss and pre-clip gradient norm: parameters after AdamW would differ where
// gradients are pure rounding noise (see the model fixture's README). The packed runs evaluate
// packed too, and say so.
TEST_F(Trainer, GradientAccumulationMatchesOneLargerBatch) {
  for (Padding padding : {Padding::kFull, Padding::kPacked}) {
    SCOPED_TRACE(padding_name(padding));
    test::TempDir one, two;
    TrainOptions a = options(one.path()), b = options(two.path());
    for (TrainOptions* o : {&a, &b}) {
      o->model_config = test::fixtures_dir() + "/model/config.json";  // dropout 0
      if (padding != Padding::kPacked) o->eval_dir.clear();
      o->padding = padding;
      o->max_steps = 2;
      o->warmup_steps = 1;
    }
    b.batch_size = 4;
    b.gradient_accumulation = 2;
    const nlohmann::ordered_json results = train(a);
    train(b);
    // The accumulated gradient's pre-clip norm and the loss, per step, as logged.
    auto logged = [](const test::TempDir& run) {
      std::map<std::string, std::vector<float>> series;
      const std::string dir = run.file("tensorboard");
      for (const auto& scalar : read_tensorboard_scalars(dir + "/" + test::TempDir::entries_of(dir).front()))
        series[scalar.tag].push_back(scalar.value);
      return series;
    };
    auto x = logged(one), y = logged(two);
    for (const char* tag : {"train/grad_norm", "train/loss"}) {
      ASSERT_EQ(x[tag].size(), 2u) << tag;
      ASSERT_EQ(y[tag].size(), 2u) << tag;
      for (size_t step = 0; step < 2; ++step) EXPECT_NEAR(x[tag][step], y[tag][step], 1e-5) << tag << " step " << step + 1;
    }
    EXPECT_EQ(results["parameters"]["padding"], padding_name(padding));
    if (padding == Padding::kPacked) {
      EXPECT_TRUE(results.contains("eval_f1"));
    }
  }
}

TEST_F(Trainer, RefusesACheckpointOfAnotherShapeOrVocab) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.eval_dir.clear();
  o.stop_after_steps = 1;
  train(o);
  auto config = nlohmann::json::parse(read_file(data_->file("config.json")));
  config["intermediate_size"] = 64;
  test::write_text(run.file("other.json"), config.dump());
  o.model_config = run.file("other.json");
  o.resume = "auto";
  try {
    train(o);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint of another model shape: intermediate_size 128 (this run: 64)"),
              std::string::npos)
        << e.what();
  }
  o.model_config = data_->file("config.json");
  o.tokenizer = test::write_other_vocab(run.file("vocab.txt"));
  try {
    train(o);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("prepared with another tokenizer"), std::string::npos) << e.what();
  }
}

// DistilBERT through the same trainer: config.json's model_type picks it, results.json and the run
// directory name it, packed batches train it, a run stopped and resumed ends bit for bit where an
// uninterrupted one does (dropout on: the RNG is restored), the run directory loads as a
// DistilBERT, and a BERT run does not resume its checkpoint.
TEST_F(Trainer, DistilBertTrainsEvaluatesAndResumesThroughTheSamePath) {
  test::TempDir straight, interrupted;
  const nlohmann::json distil = {
      {"model_type", "distilbert"}, {"dim", 32},        {"n_layers", 2}, {"n_heads", 4}, {"hidden_dim", 64}, {"dropout", 0.1},
      {"attention_dropout", 0.1},   {"qa_dropout", 0.1}};
  test::write_text(straight.file("distilbert.json"), distil.dump());
  TrainOptions o = options(straight.file("run"));
  o.model_config = straight.file("distilbert.json");
  o.padding = Padding::kPacked;
  const nlohmann::ordered_json full = train(o);
  EXPECT_EQ(full["model_type"], "distilbert");
  EXPECT_EQ(full["architecture"], "DistilBertForQuestionAnswering");
  EXPECT_EQ(full["parameters"]["model"]["dim"], 32);
  EXPECT_TRUE(full.contains("eval_f1"));
  EXPECT_EQ(read_json_file(straight.file("run/config.json"))["architectures"][0], "DistilBertForQuestionAnswering");

  TrainOptions first = options(interrupted.path());
  first.model_config = o.model_config;
  first.padding = Padding::kPacked;
  first.stop_after_steps = 4;
  EXPECT_EQ(train(first)["global_step"], 4);
  TrainOptions second = first;
  second.stop_after_steps = 0;
  second.resume = "auto";
  EXPECT_EQ(train(second)["resumed_from_step"], 4);
  const std::string name = "checkpoint-" + std::to_string(full["global_step"].get<int64_t>());
  const SafetensorsFile a = SafetensorsFile::open(straight.file("run/" + name + "/model.safetensors"));
  const SafetensorsFile b = SafetensorsFile::open(interrupted.file(name + "/model.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i)
    EXPECT_TRUE(torch::equal(a.tensors()[i].tensor, b.tensors()[i].tensor)) << a.tensors()[i].name;
  EXPECT_EQ(read_json_file(interrupted.file(name + "/trainer_state.json"))["model_config"]["model_type"], "distilbert");
  EXPECT_EQ(load_qa_model(straight.file("run"), test::vocab_path())->architecture(), "DistilBertForQuestionAnswering");

  second.model_config = data_->file("config.json");  // the fixture's BERT
  const std::string refused = test::error_of([&] { train(second); });
  EXPECT_NE(refused.find("checkpoint of another model: distilbert (this run: bert)"), std::string::npos) << refused;
}

// Every family of tests/encoder_families.hpp through the same trainer, packed (its config at the
// shards' vocabulary and sequence length, dropout on): results.json, the run directory and the
// TensorBoard hparams name it, and a run stopped after 3 steps and resumed ends bit for bit where
// one never stopped ends.
class FamilyTrainer : public Trainer, public ::testing::WithParamInterface<test::EncoderFamily> {};

TEST_P(FamilyTrainer, TrainsResumesAndNamesTheFamily) {
  const test::EncoderFamily& family = GetParam();
  test::TempDir straight, interrupted, data;
  test::prepare_shards(data.file("train"), test::squad_v1_path(), 0, 40, "train", family.tokenizer_dir());
  test::prepare_shards(data.file("eval"), test::squad_v1_path(), 40, 16, "eval", family.tokenizer_dir());
  test::write_text(straight.file("config.json"), family.training_config(0.1).dump());
  TrainOptions o = options(straight.file("run"));
  o.train_dir = data.file("train");
  o.eval_dir = data.file("eval");
  o.tokenizer = family.tokenizer_dir();
  o.model_config = straight.file("config.json");
  o.padding = Padding::kPacked;
  o.max_steps = 6;
  const nlohmann::ordered_json full = train(o);
  EXPECT_EQ(full["model_type"], family.model_type);
  EXPECT_EQ(full["architecture"], family.architecture);
  EXPECT_TRUE(full.contains("eval_f1"));
  EXPECT_EQ(read_json_file(straight.file("run/config.json"))["architectures"][0], family.architecture);
  EXPECT_EQ(load_qa_model(straight.file("run"), family.tokenizer_dir())->architecture(), family.architecture);
  const test::CommandResult read = test::run_command(std::string(MPIBERT_PYTHON) + " " + MPIBERT_TESTS_SOURCE_DIR +
                                                     "/read_tensorboard.py " + straight.file("run/tensorboard"));
  ASSERT_EQ(read.exit_status, 0) << read.output;
  const auto hparams = nlohmann::json::parse(read.output)["hparams"];
  EXPECT_EQ(hparams["model_type"], family.model_type) << read.output;
  EXPECT_EQ(hparams["architecture"], family.architecture) << read.output;

  TrainOptions first = o;
  first.output_dir = interrupted.path();
  first.stop_after_steps = 3;
  EXPECT_EQ(train(first)["global_step"], 3);
  TrainOptions second = first;
  second.stop_after_steps = 0;
  second.resume = "auto";
  EXPECT_EQ(train(second)["resumed_from_step"], 3);
  const SafetensorsFile a = SafetensorsFile::open(straight.file("run/checkpoint-6/model.safetensors"));
  const SafetensorsFile b = SafetensorsFile::open(interrupted.file("checkpoint-6/model.safetensors"));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i)
    EXPECT_TRUE(torch::equal(a.tensors()[i].tensor, b.tensors()[i].tensor)) << a.tensors()[i].name;
}

// --cuda-graphs with a family whose packed attention loops over the batch's features on the host
// (DeBERTa; ModernBERT's windowed layers) is refused naming the family, before anything is
// written; the others get as far as the device (here: "CUDA graphs need a GPU").
TEST_P(FamilyTrainer, CudaGraphsAreRefusedWhereThePackedStepLoopsOverFeatures) {
  const test::EncoderFamily& family = GetParam();
  test::TempDir run, data;
  test::prepare_shards(data.file("train"), test::squad_v1_path(), 0, 8, "train", family.tokenizer_dir());
  test::write_text(run.file("config.json"), family.training_config(0.0).dump());
  TrainOptions o = options(run.file("run"));
  o.train_dir = data.file("train");
  o.eval_dir.clear();
  o.tokenizer = family.tokenizer_dir();
  o.model_config = run.file("config.json");
  o.padding = Padding::kPacked;
  o.cuda_graphs = true;
  o.device = DeviceChoice::kCpu;
  const std::string refused = test::error_of([&] { train(o); });
  // The model says whether its packed step loops over features on the host; the refusal gives its words.
  const std::string problem =
      make_qa_model(family.training_config(0.0), run.file("config.json"), {})->packed_step_capture_problem();
  EXPECT_NE(refused.find(problem.empty() ? "CUDA graphs need a GPU" : problem), std::string::npos) << refused;
  EXPECT_NE(refused.find("--cuda-graphs"), std::string::npos) << refused;
  EXPECT_FALSE(std::filesystem::exists(run.file("run"))) << "the refused run made its directory";
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTrainer, ::testing::ValuesIn(test::encoder_families()), test::family_test_name);

// A checkpoint damaged on disk (a flipped byte, a file cut short, its checksums gone) is refused
// by name when asked for, and --resume auto falls back to the newest intact one.
TEST_F(Trainer, DamagedCheckpointIsRefusedAndAutoResumeTakesTheOneBefore) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.eval_dir.clear();
  o.save_steps = 1;
  o.save_total_limit = 0;  // keep all three
  o.stop_after_steps = 3;
  train(o);
  const std::string newest = run.file("checkpoint-3"), before = run.file("checkpoint-2");
  auto flip_byte = [](const std::string& path, size_t at) {
    std::string bytes = read_file_bytes(path);
    bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
    test::write_text(path, bytes);
  };
  flip_byte(newest + "/model.safetensors", read_file_bytes(newest + "/model.safetensors").size() - 5);
  TrainOptions resume = o;
  resume.stop_after_steps = 1;
  resume.resume = newest;
  std::string error = test::error_of([&] { train(resume); });
  EXPECT_NE(error.find(newest + "/model.safetensors: CRC-32"), std::string::npos) << error;
  EXPECT_NE(error.find("the file is damaged"), std::string::npos) << error;

  const std::string own = before + "/rank-0.safetensors";
  test::write_text(own, read_file_bytes(own).substr(0, 100));
  resume.resume = before;
  error = test::error_of([&] { train(resume); });
  EXPECT_NE(error.find(own + ": has 100 bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("cut short"), std::string::npos) << error;

  fs::remove(run.file("checkpoint-1/checksums.json"));
  resume.resume = run.file("checkpoint-1");
  error = test::error_of([&] { train(resume); });
  EXPECT_NE(error.find("checksums.json: missing: the checkpoint is incomplete"), std::string::npos) << error;

  // Nothing intact: auto refuses rather than start over beside three damaged checkpoints.
  resume.resume = "auto";
  error = test::error_of([&] { train(resume); });
  EXPECT_NE(error.find("none of its 3 checkpoints is intact"), std::string::npos) << error;

  // With an intact one behind the damaged ones, auto takes it.
  TrainOptions again = options(run.file("again"));
  again.eval_dir.clear();
  again.save_steps = 1;
  again.stop_after_steps = 2;
  train(again);
  flip_byte(run.file("again/checkpoint-2/trainer_state.json"), 3);
  again.resume = "auto";
  again.stop_after_steps = 1;
  const nlohmann::ordered_json resumed = train(again);
  EXPECT_EQ(resumed["resumed_from_step"], 1);
  EXPECT_EQ(resumed["global_step"], 2);
}

// A save that replaces the checkpoint of its own step (a run resumed from an earlier checkpoint
// reaches a step saved before) and is killed between moving the old one aside and renaming the
// new one in leaves the old one whole: --resume auto puts it back and resumes from it. A save that
// completes leaves no trace of the one it replaced.
TEST_F(Trainer, CheckpointReplacedByASaveKilledHalfWayIsPutBack) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.eval_dir.clear();
  o.save_steps = 2;
  o.save_total_limit = 0;  // keep them all: checkpoint-2 is resumed twice
  o.stop_after_steps = 4;
  train(o);
  const std::string four = run.file("checkpoint-4");
  const std::string saved_model = read_file_bytes(four + "/model.safetensors");

  const std::string again =
      test::bin_dir() + "/mpibert train --model-config " + data_->file("config.json") + " --vocab " + test::vocab_path() +
      " --train-shards " + data_->file("train") + " --output-dir " + run.path() +
      " --batch-size 8 --learning-rate 0.001 --warmup-ratio 0.2 --logging-steps 0 --save-steps 2 --save-total-limit 0" +
      " --stop-after-steps 2 --resume " + run.file("checkpoint-2");
  const test::CommandResult killed = test::run_command("MPIBERT_INJECT_KILL=0:4:replacing-checkpoint " + again + " 2>&1");
  EXPECT_NE(killed.exit_status, 0) << killed.output;
  EXPECT_FALSE(fs::exists(four)) << killed.output;  // killed between the renames
  EXPECT_TRUE(fs::exists(run.file(".checkpoint-4.replaced")));

  TrainOptions resume = o;
  resume.resume = "auto";
  resume.stop_after_steps = 1;
  const nlohmann::ordered_json resumed = train(resume);
  EXPECT_EQ(resumed["resumed_from_step"], 4);
  EXPECT_FALSE(fs::exists(run.file(".checkpoint-4.replaced")));

  // Uninterrupted, the same replacement leaves the new checkpoint alone under the step's name.
  const test::CommandResult replaced = test::run_command(again + " 2>&1");
  ASSERT_EQ(replaced.exit_status, 0) << replaced.output;
  verify_checkpoint(four, 0);
  EXPECT_EQ(read_file_bytes(four + "/model.safetensors"), saved_model);  // resumed bit for bit: the same model
  EXPECT_FALSE(fs::exists(run.file(".checkpoint-4.replaced")));
}

// --overwrite-output-dir replaces the whole earlier run: a checkpoint a killed save had moved aside
// (.checkpoint-STEP.replaced) goes with it, and is not put back for a later --resume auto.
TEST_F(Trainer, OverwritingARunRemovesTheCheckpointAKilledSaveMovedAside) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.eval_dir.clear();
  o.save_steps = 2;
  o.stop_after_steps = 2;
  train(o);
  // What a save of step 4 killed between its renames leaves: the old checkpoint-4, moved aside.
  fs::copy(run.file("checkpoint-2"), run.file(".checkpoint-4.replaced"), fs::copy_options::recursive);

  TrainOptions overwrite = o;
  overwrite.overwrite_output_dir = true;
  overwrite.save_steps = 1;
  overwrite.stop_after_steps = 1;
  train(overwrite);
  EXPECT_FALSE(fs::exists(run.file(".checkpoint-4.replaced")));
  EXPECT_FALSE(fs::exists(run.file("checkpoint-4")));
  EXPECT_FALSE(fs::exists(run.file("checkpoint-2")));

  TrainOptions resume = o;
  resume.resume = "auto";
  resume.stop_after_steps = 1;
  EXPECT_EQ(train(resume)["resumed_from_step"], 1);
}

// Only folders named checkpoint-DIGITS are the run's checkpoints: a user's checkpoint-2-best or
// checkpoint-9x beside them is neither resumed, nor rotated away, nor removed by
// --overwrite-output-dir.
TEST_F(Trainer, OnlyCheckpointAndDigitsNamesAreCheckpoints) {
  test::TempDir run;
  TrainOptions o = options(run.path());
  o.eval_dir.clear();
  o.save_steps = 1;
  o.save_total_limit = 1;
  o.stop_after_steps = 2;
  train(o);
  for (const char* name :
       {"checkpoint-9-best", "checkpoint-99x", "checkpoint-", "checkpoint-+9", "checkpoint-99999999999999999999"}) {
    fs::copy(run.file("checkpoint-2"), run.file(name), fs::copy_options::recursive);  // a checkpoint in all but name
    EXPECT_TRUE(checkpoints_by_step(run.path()) == std::vector<std::string>{run.file("checkpoint-2")}) << name;
  }
  TrainOptions resume = o;
  resume.resume = "auto";
  resume.stop_after_steps = 1;
  EXPECT_EQ(train(resume)["resumed_from_step"], 2);        // not 9 or 99
  EXPECT_TRUE(fs::exists(run.file("checkpoint-9-best")));  // save_total_limit 1 rotated checkpoint-2 away, not these
  EXPECT_FALSE(fs::exists(run.file("checkpoint-2")));
  TrainOptions overwrite = o;
  overwrite.overwrite_output_dir = true;
  overwrite.stop_after_steps = 1;
  train(overwrite);
  for (const char* name :
       {"checkpoint-9-best", "checkpoint-99x", "checkpoint-", "checkpoint-+9", "checkpoint-99999999999999999999"})
    EXPECT_TRUE(fs::exists(run.file(name))) << name;
}

// Shards from mpibert-prep record their tokenizer's digest: training them with another vocab.txt
// of the same size (a model's own, say) would silently feed token ids that mean other words.
TEST_F(Trainer, RefusesATokenizerOtherThanTheShardsWerePreparedWith) {
  test::TempDir run;
  test::prepare_shards(run.file("train"), test::squad_v1_path(), 0, 8, "train");
  TrainOptions o = options(run.file("out"));
  o.train_dir = run.file("train");
  o.eval_dir.clear();
  o.stop_after_steps = 1;
  o.tokenizer = test::write_other_vocab(run.file("vocab.txt"));
  try {
    train(o);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(run.file("train") + "/manifest.json: prepared with another tokenizer"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mpibert-prep --tokenizer " + run.file("vocab.txt")), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(run.file("out/results.json")));
  o.tokenizer = test::vocab_path();  // the same tokenizer trains
  train(o);
  EXPECT_TRUE(fs::exists(run.file("out/checkpoint-1")));
}

}  // namespace
}  // namespace mpibert
