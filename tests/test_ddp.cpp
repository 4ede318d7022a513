// Data-parallel training end to end, through the mpibert command under mpiexec: 2 ranks give the
// parameters of 1 rank with the same global batch, zero1 those of ddp, accumulation those of a
// larger micro-batch; evaluation and resume do not depend on the number of ranks; failures,
// hangs and signals end or stop every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <torch/cuda.h>

#include "encoder_families.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/nn/safetensors.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class DataParallelRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    test::prepare_shards(data_->file("train"), test::squad_v1_path(), 0, 64, "train");
    test::prepare_shards(data_->file("eval"), test::squad_v1_path(), 64, 40, "eval");
    auto config = nlohmann::json::parse(read_file(test::fixtures_dir() + "/model/config.json"));
    config["hidden_dropout_prob"] = 0.0;  // the same arithmetic on 1 and 2 ranks needs no dropout
    config["attention_probs_dropout_prob"] = 0.0;
    test::write_text(data_->file("config.json"), config.dump());
    config["hidden_dropout_prob"] = 0.1;  // resuming must restore every rank's RNG
    config["attention_probs_dropout_prob"] = 0.1;
    test::write_text(data_->file("config-dropout.json"), config.dump());
  }
  static void TearDownTestSuite() { delete data_; }

  // `mpibert train` on `ranks` ranks (0: without mpiexec), into `out`.
  // `config`, `shards`: files of data_; `tokenizer`: the shards' and the model's.
  static test::CommandResult train(int ranks, const std::string& out, const std::string& extra,
                                   const std::string& environment = "", const std::string& config = "config.json",
                                   const std::string& shards = "train", const std::string& tokenizer = test::vocab_path()) {
    const std::string launcher = ranks == 0 ? "timeout -k 10 120 "
                                            : "timeout -k 10 120 " + test::mpiexec() + " -n " + std::to_string(ranks) +
                                                  " --oversubscribe --bind-to none ";
    return test::run_command(environment + " " + launcher + test::bin_dir() + "/mpibert train --model-config " +
                             data_->file(config) + " --tokenizer " + tokenizer + " --train-shards " + data_->file(shards) +
                             " --output-dir " + out +
                             " --threads 1 --padding full --learning-rate 0.001 --logging-steps 1 --seed 7 " + extra + " 2>&1");
  }

  static std::string checkpoint(const std::string& out, int step) { return out + "/checkpoint-" + std::to_string(step); }

  // The trained layers' count, for test::has_zero_true_gradient.
  static int64_t num_hidden_layers() {
    return nlohmann::json::parse(read_file(data_->file("config.json")))["num_hidden_layers"].get<int64_t>();
  }

  // The largest |a - b| over the tensors of two safetensors files with the same names (those
  // with a true gradient).
  static double max_difference(const std::string& a_path, const std::string& b_path) {
    const SafetensorsFile a = SafetensorsFile::open(a_path), b = SafetensorsFile::open(b_path);
    EXPECT_EQ(a.tensors().size(), b.tensors().size());
    double worst = 0;
    const int64_t layers = num_hidden_layers();
    for (const auto& tensor : a.tensors()) {
      const torch::Tensor other = b.get(tensor.name);
      EXPECT_TRUE(other.sizes().equals(tensor.tensor.sizes())) << tensor.name;
      if (tensor.tensor.is_floating_point() && !test::has_zero_true_gradient(tensor.name, layers))
        worst = std::max(worst, (tensor.tensor.to(torch::kDouble) - other.to(torch::kDouble)).abs().max().item<double>());
    }
    return worst;
  }

  static test::TempDir* data_;
};
test::TempDir* DataParallelRun::data_ = nullptr;

const char* const kStrategies[] = {"ddp", "zero1", "zero2", "fsdp"};

// Every strategy, on 2 and on 3 ranks, follows one process given the same global batch (12):
// the reduction order differs, so within round-off, not bit for bit.
TEST_F(DataParallelRun, EveryStrategyOnTwoAndThreeRanksMatchesOneRankWithTheSameGlobalBatch) {
  test::TempDir runs;
  auto one = train(0, runs.file("one"), "--batch-size 12 --max-steps 3");
  ASSERT_EQ(one.exit_status, 0) << one.output;
  const std::string reference = checkpoint(runs.file("one"), 3) + "/model.safetensors";
  // The comparison can tell runs apart: half the batch on one rank ends elsewhere.
  auto half = train(0, runs.file("half"), "--batch-size 6 --max-steps 3");
  ASSERT_EQ(half.exit_status, 0) << half.output;
  EXPECT_GT(max_difference(reference, checkpoint(runs.file("half"), 3) + "/model.safetensors"), 1e-4);
  const auto one_state = nlohmann::json::parse(read_file(checkpoint(runs.file("one"), 3) + "/trainer_state.json"));

  for (int ranks : {2, 3}) {
    for (const char* strategy : kStrategies) {
      const std::string run = runs.file(std::string(strategy) + "-" + std::to_string(ranks));
      auto result = train(ranks, run, "--batch-size " + std::to_string(12 / ranks) + " --max-steps 3 --strategy " + strategy);
      ASSERT_EQ(result.exit_status, 0) << result.output;
      EXPECT_NE(result.output.find("global batch 12 = " + std::to_string(12 / ranks) + " x 1 accumulation x " +
                                   std::to_string(ranks) + " ranks"),
                std::string::npos)
          << result.output;
      const double difference = max_difference(reference, checkpoint(run, 3) + "/model.safetensors");
      std::cout << ranks << " ranks " << strategy << " vs 1 rank: max |difference| " << difference << "\n";
      EXPECT_LT(difference, 1e-5) << strategy << " on " << ranks;
      // The logged loss is the mean over the ranks' parts of the batch.
      const auto state = nlohmann::json::parse(read_file(checkpoint(run, 3) + "/trainer_state.json"));
      for (size_t i = 0; i < 3; ++i)
        EXPECT_NEAR(one_state["loss_history"][i]["loss"].get<double>(), state["loss_history"][i]["loss"].get<double>(), 1e-5);
      const auto results = nlohmann::json::parse(read_file(run + "/results.json"));
      EXPECT_EQ(results["parallel"]["world_size"], ranks);
      EXPECT_EQ(results["parallel"]["strategy"], strategy);
      EXPECT_EQ(results["parameters"]["global_batch_size"], 12);
    }
  }
}

// DistilBERT through the same command: config.json's model_type picks it, and ddp and fsdp on 2
// ranks end where 1 rank ends with the same global batch (the strategies know it by its
// description alone), as does an fsdp run resumed on 1 rank from its checkpoint.
TEST_F(DataParallelRun, DistilBertOnTwoRanksMatchesOneRank) {
  test::TempDir runs;
  const nlohmann::json distil = {{"model_type", "distilbert"},
                                 {"dim", 32},
                                 {"n_layers", num_hidden_layers()},
                                 {"n_heads", 4},
                                 {"hidden_dim", 64},
                                 {"dropout", 0.0},
                                 {"attention_dropout", 0.0},
                                 {"qa_dropout", 0.0},
                                 {"max_position_embeddings", 512}};
  test::write_text(data_->file("distilbert.json"), distil.dump());
  auto one = train(0, runs.file("one"), "--batch-size 12 --max-steps 3", "", "distilbert.json");
  ASSERT_EQ(one.exit_status, 0) << one.output;
  const std::string reference = checkpoint(runs.file("one"), 3) + "/model.safetensors";
  for (const char* strategy : {"ddp", "fsdp"}) {
    const std::string run = runs.file(strategy);
    auto result = train(2, run, std::string("--batch-size 6 --max-steps 3 --strategy ") + strategy, "", "distilbert.json");
    ASSERT_EQ(result.exit_status, 0) << result.output;
    const double difference = max_difference(reference, checkpoint(run, 3) + "/model.safetensors");
    std::cout << "DistilBERT, 2 ranks " << strategy << " vs 1 rank: max |difference| " << difference << "\n";
    EXPECT_LT(difference, 1e-5) << strategy;
    const auto results = nlohmann::json::parse(read_file(run + "/results.json"));
    EXPECT_EQ(results["architecture"], "DistilBertForQuestionAnswering");
    EXPECT_EQ(results["parallel"]["strategy"], strategy);
  }
  // fsdp's checkpoint reshards: 2 ranks stopped after step 1, resumed on 1 rank, end where 1 rank ends.
  const std::string resharded = runs.file("resharded");
  auto first = train(2, resharded, "--batch-size 6 --max-steps 3 --stop-after-steps 1 --strategy fsdp", "", "distilbert.json");
  ASSERT_EQ(first.exit_status, 0) << first.output;
  auto second = train(0, resharded, "--batch-size 12 --max-steps 3 --resume auto", "", "distilbert.json");
  ASSERT_EQ(second.exit_status, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  const double difference = max_difference(reference, checkpoint(resharded, 3) + "/model.safetensors");
  std::cout << "DistilBERT, 2 ranks fsdp resumed on 1 rank vs 1 rank: max |difference| " << difference << "\n";
  EXPECT_LT(difference, 1e-5);
}

// Every family of tests/encoder_families.hpp through the command: fsdp on 2 ranks stopped after
// step 1 and resumed on 1 rank (its checkpoint resharded over the family's own units) ends where
// 1 rank ends with the same global batch.
class FamilyDataParallelRun : public DataParallelRun, public ::testing::WithParamInterface<test::EncoderFamily> {};

TEST_P(FamilyDataParallelRun, FsdpCheckpointReshardsOntoOneRank) {
  const test::EncoderFamily& family = GetParam();
  test::TempDir runs;
  const std::string name = family.fixture + ".json", shards = family.fixture + "-train", tokenizer = family.tokenizer_dir();
  test::write_text(data_->file(name), family.training_config(0.0).dump());
  test::prepare_shards(data_->file(shards), test::squad_v1_path(), 0, 24, "train", tokenizer);
  auto one = train(0, runs.file("one"), "--batch-size 12 --max-steps 2", "", name, shards, tokenizer);
  ASSERT_EQ(one.exit_status, 0) << one.output;
  const std::string resharded = runs.file("resharded");
  auto first =
      train(2, resharded, "--batch-size 6 --max-steps 2 --stop-after-steps 1 --strategy fsdp", "", name, shards, tokenizer);
  ASSERT_EQ(first.exit_status, 0) << first.output;
  auto second = train(0, resharded, "--batch-size 12 --max-steps 2 --resume auto", "", name, shards, tokenizer);
  ASSERT_EQ(second.exit_status, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  const double difference =
      max_difference(checkpoint(runs.file("one"), 2) + "/model.safetensors", checkpoint(resharded, 2) + "/model.safetensors");
  std::cout << family.fixture << ", 2 ranks fsdp resumed on 1 rank vs 1 rank: max |difference| " << difference << "\n";
  EXPECT_LT(difference, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyDataParallelRun, ::testing::ValuesIn(test::encoder_families()), test::family_test_name);

// With gradient accumulation, the sharded strategies end where ddp does, and hold less per rank
// between steps: zero1 half the optimizer state, zero2 also half the gradients, fsdp also half the
// parameters (results.json's memory_per_rank, measured from the storage allocated).
TEST_F(DataParallelRun, ShardedStrategiesMatchDdpHoldingLessPerRank) {
  test::TempDir runs;
  std::map<std::string, nlohmann::json> memory;
  for (const char* strategy : kStrategies) {
    auto run = train(2, runs.file(strategy),
                     std::string("--batch-size 4 --max-steps 4 --gradient-accumulation 2 --strategy ") + strategy);
    ASSERT_EQ(run.exit_status, 0) << run.output;
    memory[strategy] =
        nlohmann::json::parse(read_file(runs.file(std::string(strategy) + "/results.json")))["parallel"]["memory_per_rank"];
    ASSERT_EQ(memory[strategy].size(), 2u) << strategy;
    if (std::string(strategy) == "ddp") continue;
    const double difference = max_difference(checkpoint(runs.file("ddp"), 4) + "/model.safetensors",
                                             checkpoint(runs.file(strategy), 4) + "/model.safetensors");
    std::cout << strategy << " vs ddp, accumulation 2: max |difference| " << difference << "\n";
    EXPECT_LT(difference, 1e-5) << strategy;
  }
  auto ratio = [&](const char* strategy, const char* kind) {
    return memory[strategy][0][kind].get<double>() / memory["ddp"][0][kind].get<double>();
  };
  EXPECT_NEAR(ratio("zero1", "optimizer_state_bytes"), 0.5, 0.01);
  EXPECT_NEAR(ratio("zero1", "parameter_bytes"), 1.0, 0.01);
  EXPECT_NEAR(ratio("zero1", "gradient_bytes"), 1.5, 0.01);  // the full buckets and the reduced slices
  EXPECT_NEAR(ratio("zero2", "optimizer_state_bytes"), 0.5, 0.01);
  EXPECT_NEAR(ratio("zero2", "gradient_bytes"), 0.5, 0.01);
  EXPECT_NEAR(ratio("zero2", "parameter_bytes"), 1.0, 0.01);
  for (const char* kind : {"parameter_bytes", "gradient_bytes", "optimizer_state_bytes"})
    EXPECT_NEAR(ratio("fsdp", kind), 0.5, 0.01) << kind;
  EXPECT_GT(memory["fsdp"][1]["peak_rss_bytes"].get<double>(), 0);
  // ddp: one optimizer file from rank 0; sharded: each rank's slices in its own file, which together
  // hold as many moments as ddp's.
  EXPECT_TRUE(fs::exists(checkpoint(runs.file("ddp"), 4) + "/optimizer.safetensors"));
  // The file is named, not a temporary: a range-for over a temporary's tensors() would read a
  // destroyed object (found by AddressSanitizer, stack-use-after-scope).
  auto exp_avg_elements = [](const std::string& path) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    int64_t elements = 0;
    for (const auto& tensor : file.tensors())
      if (tensor.name.rfind("exp_avg.", 0) == 0) elements += tensor.tensor.numel();
    return elements;
  };
  const int64_t full_elements = exp_avg_elements(checkpoint(runs.file("ddp"), 4) + "/optimizer.safetensors");
  for (const char* strategy : {"zero1", "zero2", "fsdp"}) {
    EXPECT_FALSE(fs::exists(checkpoint(runs.file(strategy), 4) + "/optimizer.safetensors")) << strategy;
    int64_t sharded_elements = 0;
    for (int rank : {0, 1})
      sharded_elements += exp_avg_elements(checkpoint(runs.file(strategy), 4) + "/rank-" + std::to_string(rank) + ".safetensors");
    EXPECT_EQ(sharded_elements, full_elements) << strategy;
  }
}

TEST_F(DataParallelRun, AccumulationMatchesALargerMicroBatch) {
  test::TempDir runs;
  auto accumulated = train(2, runs.file("accumulated"), "--batch-size 2 --gradient-accumulation 2 --max-steps 3");
  ASSERT_EQ(accumulated.exit_status, 0) << accumulated.output;
  auto single = train(2, runs.file("single"), "--batch-size 4 --max-steps 3");
  ASSERT_EQ(single.exit_status, 0) << single.output;
  const double difference = max_difference(checkpoint(runs.file("accumulated"), 3) + "/model.safetensors",
                                           checkpoint(runs.file("single"), 3) + "/model.safetensors");
  std::cout << "2 x 2 accumulated vs batch 4: max |difference| " << difference << "\n";
  EXPECT_LT(difference, 1e-5);
}

TEST_F(DataParallelRun, TwoRankEvaluationWritesTheSamePredictionsAsOneRank) {
  test::TempDir runs;
  auto trained = train(0, runs.file("train"), "--batch-size 8 --max-steps 2");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  const std::string eval = test::bin_dir() + "/mpibert eval --model " + checkpoint(runs.file("train"), 2) + " --data " +
                           data_->file("eval") + " --batch-size 8 --threads 1 --output-dir ";
  auto one = test::run_command("timeout -k 10 120 " + eval + runs.file("one") + " 2>&1");
  ASSERT_EQ(one.exit_status, 0) << one.output;
  for (int ranks : {2, 3}) {
    const std::string out = runs.file("ranks" + std::to_string(ranks));
    auto many = test::run_command("timeout -k 10 120 " + test::mpiexec() + " -n " + std::to_string(ranks) +
                                  " --oversubscribe --bind-to none " + eval + out + " 2>&1");
    ASSERT_EQ(many.exit_status, 0) << many.output;
    EXPECT_EQ(read_file(out + "/predictions.json"), read_file(runs.file("one/predictions.json"))) << ranks;
    EXPECT_EQ(read_file(out + "/nbest_predictions.json"), read_file(runs.file("one/nbest_predictions.json"))) << ranks;
    const auto metrics = nlohmann::json::parse(read_file(out + "/eval_results.json"));
    const auto reference = nlohmann::json::parse(read_file(runs.file("one/eval_results.json")));
    EXPECT_EQ(metrics["eval_f1"], reference["eval_f1"]);
    EXPECT_NEAR(metrics["eval_loss"].get<double>(), reference["eval_loss"].get<double>(), 1e-6);
    EXPECT_EQ(metrics["eval_ranks"], ranks);
  }
}

TEST_F(DataParallelRun, TwoRankResumeIsBitExact) {
  for (const char* strategy : kStrategies) {
    test::TempDir runs;
    const std::string options = std::string("--batch-size 4 --max-steps 5 --strategy ") + strategy;
    auto whole = train(2, runs.file("whole"), options, "", "config-dropout.json");
    ASSERT_EQ(whole.exit_status, 0) << whole.output;
    auto first = train(2, runs.file("parts"), options + " --stop-after-steps 2", "", "config-dropout.json");
    ASSERT_EQ(first.exit_status, 0) << first.output;
    ASSERT_TRUE(fs::exists(checkpoint(runs.file("parts"), 2))) << first.output;
    auto rest = train(2, runs.file("parts"), options + " --resume auto", "", "config-dropout.json");
    ASSERT_EQ(rest.exit_status, 0) << rest.output;
    EXPECT_NE(rest.output.find("resumed from"), std::string::npos) << rest.output;
    const std::string a = checkpoint(runs.file("whole"), 5), b = checkpoint(runs.file("parts"), 5);
    EXPECT_EQ(read_file_bytes(a + "/model.safetensors"), read_file_bytes(b + "/model.safetensors")) << strategy;
    for (const char* file : {"rank-0.safetensors", "rank-1.safetensors"})
      EXPECT_EQ(read_file_bytes(a + "/" + file), read_file_bytes(b + "/" + file)) << strategy << " " << file;
    const auto state_a = nlohmann::json::parse(read_file(a + "/trainer_state.json"));
    const auto state_b = nlohmann::json::parse(read_file(b + "/trainer_state.json"));
    EXPECT_EQ(state_a["loss_history"], state_b["loss_history"]) << strategy;
  }
}

// fp16 loss scaling across ranks: a non-finite gradient on one rank alone (MPIBERT_INJECT_OVERFLOW,
// after the gradients were reduced: the other rank's are finite, ddp's whole and zero1's slices)
// makes every rank skip that step: the scale backs off and the schedule waits. A run stopped after
// the skip and resumed ends bit for bit where the uninterrupted one does (the scaler travels in
// the checkpoint).
TEST_F(DataParallelRun, Fp16SkipsAStepOnEveryRankWhenOneRanksGradientIsNotFiniteAndResumesBitExact) {
  for (const char* strategy : {"ddp", "zero1"}) {
    test::TempDir runs;
    const std::string options = std::string("--batch-size 4 --max-steps 5 --fp16 --strategy ") + strategy;
    const std::string overflow = "MPIBERT_INJECT_OVERFLOW=1:1";  // rank 1, the second step
    auto whole = train(2, runs.file("whole"), options, overflow, "config-dropout.json");
    ASSERT_EQ(whole.exit_status, 0) << whole.output;
    EXPECT_NE(whole.output.find("step 2: a gradient is not finite at loss scale 65536"), std::string::npos) << whole.output;
    const auto results = nlohmann::json::parse(read_file(runs.file("whole") + "/results.json"));
    EXPECT_EQ(results["skipped_steps"], 1) << strategy;
    EXPECT_EQ(results["loss_scale"], 32768.0) << strategy;
    std::vector<nlohmann::json> steps;
    std::istringstream metrics(read_file(runs.file("whole") + "/metrics.jsonl"));
    for (std::string line; std::getline(metrics, line);)
      if (nlohmann::json::parse(line).contains("loss_scale")) steps.push_back(nlohmann::json::parse(line));
    ASSERT_EQ(steps.size(), 5u) << strategy;
    EXPECT_EQ(steps[1]["skipped"], true);
    EXPECT_EQ(steps[1]["loss_scale"], 65536.0);
    EXPECT_EQ(steps[2]["loss_scale"], 32768.0);
    EXPECT_EQ(steps[2]["learning_rate"], steps[1]["learning_rate"]) << "the schedule moved over a skipped step";
    for (size_t i : {0, 2, 3, 4}) EXPECT_EQ(steps[i]["skipped"], false) << strategy << " step " << i + 1;

    auto first = train(2, runs.file("parts"), options + " --stop-after-steps 3", overflow, "config-dropout.json");
    ASSERT_EQ(first.exit_status, 0) << first.output;
    auto rest = train(2, runs.file("parts"), options + " --resume auto", overflow, "config-dropout.json");
    ASSERT_EQ(rest.exit_status, 0) << rest.output;
    const std::string a = checkpoint(runs.file("whole"), 5), b = checkpoint(runs.file("parts"), 5);
    EXPECT_EQ(read_file_bytes(a + "/model.safetensors"), read_file_bytes(b + "/model.safetensors")) << strategy;
    const auto resumed = nlohmann::json::parse(read_file(runs.file("parts") + "/results.json"));
    EXPECT_EQ(resumed["skipped_steps"], 1) << strategy;
    EXPECT_EQ(resumed["loss_scale"], 32768.0) << strategy;
  }
}

// Universal checkpoints: a run stopped every 2 steps and resumed on another number of ranks with
// another strategy (global batch 6 throughout, within the first epoch: the epoch's last, partial
// batch has as many samples as the ranks divide evenly) ends where the run that never stopped does,
// within the round-off of the different reduction orders. Chain A: 2 ranks fsdp -> 3 ranks zero1 -> 1 rank;
// chain B: 2 ranks ddp -> 1 rank -> 3 ranks fsdp; chain C: 2 ranks ddp -> 2 ranks fsdp -> 2 ranks zero2.
TEST_F(DataParallelRun, ResumingOnAnotherNumberOfRanksOrStrategyFollowsTheRunThatNeverStopped) {
  test::TempDir runs;
  auto whole = train(2, runs.file("whole"), "--batch-size 3 --max-steps 6");
  ASSERT_EQ(whole.exit_status, 0) << whole.output;
  const std::string reference = checkpoint(runs.file("whole"), 6) + "/model.safetensors";
  const std::vector<std::vector<std::pair<int, std::string>>> chains = {
      {{2, "fsdp"}, {3, "zero1"}, {1, "ddp"}}, {{2, "ddp"}, {1, "ddp"}, {3, "fsdp"}}, {{2, "ddp"}, {2, "fsdp"}, {2, "zero2"}}};
  for (size_t c = 0; c < chains.size(); ++c) {
    const std::string run = runs.file("chain-" + std::to_string(c));
    std::string legs;
    for (size_t leg = 0; leg < chains[c].size(); ++leg) {
      const auto& [ranks, strategy] = chains[c][leg];
      legs += " -> " + std::to_string(ranks) + " " + strategy;
      auto result = train(ranks == 1 ? 0 : ranks, run,
                          "--batch-size " + std::to_string(6 / ranks) + " --max-steps 6 --stop-after-steps 2 --strategy " +
                              strategy + (leg > 0 ? " --resume auto" : ""));
      ASSERT_EQ(result.exit_status, 0) << legs << "\n" << result.output;
      if (leg > 0) {
        EXPECT_NE(result.output.find("resumed from"), std::string::npos) << result.output;
      }
    }
    const double difference = max_difference(reference, checkpoint(run, 6) + "/model.safetensors");
    std::cout << "chain" << legs << " vs uninterrupted: max |difference| " << difference << "\n";
    EXPECT_LT(difference, 1e-5) << legs;
    const auto uninterrupted = nlohmann::json::parse(read_file(checkpoint(runs.file("whole"), 6) + "/trainer_state.json"));
    const auto resumed = nlohmann::json::parse(read_file(checkpoint(run, 6) + "/trainer_state.json"));
    ASSERT_EQ(resumed["loss_history"].size(), 6u) << legs;
    for (size_t i = 0; i < 6; ++i)  // the same samples in every step: the data order continued
      EXPECT_NEAR(uninterrupted["loss_history"][i]["loss"].get<double>(), resumed["loss_history"][i]["loss"].get<double>(), 1e-5)
          << legs << " step " << i + 1;
  }
}

// hsdp reshards like the others: 4 ranks as 2 shard groups of 2 -> 3 ranks fsdp, and 2 ranks ddp ->
// 4 ranks hsdp, each ending where the uninterrupted run ends (global batch 12 throughout, 4 steps:
// within the first epoch, whose end falls elsewhere for 3 and 4 ranks, their samplers padding it).
TEST_F(DataParallelRun, HsdpCheckpointsReshardToAndFromTheOtherStrategies) {
  test::TempDir runs;
  auto whole = train(2, runs.file("whole"), "--batch-size 6 --max-steps 4");
  ASSERT_EQ(whole.exit_status, 0) << whole.output;
  const std::string reference = checkpoint(runs.file("whole"), 4) + "/model.safetensors";
  const std::string hsdp = "hsdp --shard-group-size 2";
  const std::vector<std::vector<std::pair<int, std::string>>> chains = {{{4, hsdp}, {3, "fsdp"}}, {{2, "ddp"}, {4, hsdp}}};
  for (size_t c = 0; c < chains.size(); ++c) {
    const std::string run = runs.file("chain-" + std::to_string(c));
    std::string legs;
    for (size_t leg = 0; leg < chains[c].size(); ++leg) {
      const auto& [ranks, strategy] = chains[c][leg];
      legs += " -> " + std::to_string(ranks) + " " + strategy;
      auto result = train(ranks, run,
                          "--batch-size " + std::to_string(12 / ranks) + " --max-steps 4 --stop-after-steps 2 --strategy " +
                              strategy + (leg > 0 ? " --resume auto" : ""));
      ASSERT_EQ(result.exit_status, 0) << legs << "\n" << result.output;
    }
    const double difference = max_difference(reference, checkpoint(run, 4) + "/model.safetensors");
    std::cout << "chain" << legs << " vs uninterrupted: max |difference| " << difference << "\n";
    EXPECT_LT(difference, 1e-5) << legs;
  }
  // Shard groups must divide the ranks: refused by name on every rank count that they do not.
  auto uneven = train(3, runs.file("uneven"), "--batch-size 4 --max-steps 1 --strategy hsdp --shard-group-size 2");
  EXPECT_NE(uneven.exit_status, 0);
  EXPECT_NE(uneven.output.find("--shard-group-size: 2 does not divide the 3 ranks into shard groups"), std::string::npos)
      << uneven.output;
}

// The position in the epoch converts to another global micro-batch only where it divides the
// samples done; otherwise the resume is refused, naming the batch sizes.
TEST_F(DataParallelRun, ResumeWhereTheSamplesDoneDoNotDivideIntoTheNewBatchIsRefused) {
  test::TempDir runs;
  auto two = train(2, runs.file("run"), "--batch-size 4 --max-steps 4 --stop-after-steps 1");
  ASSERT_EQ(two.exit_status, 0) << two.output;
  auto three = train(3, runs.file("run"), "--batch-size 4 --max-steps 4 --resume auto");
  EXPECT_NE(three.exit_status, 0);
  EXPECT_NE(three.output.find("consumed 8 samples of the epoch, not a multiple of this run's 3 x 4"), std::string::npos)
      << three.output;
}

TEST_F(DataParallelRun, RanksStartedWithDifferentOptionsRefuseToStart) {
  test::TempDir runs;
  const std::string rank_command = test::bin_dir() + "/mpibert train --model-config " + data_->file("config.json") + " --vocab " +
                                   test::vocab_path() + " --train-shards " + data_->file("train") + " --output-dir " +
                                   runs.file("out") + " --threads 1 --max-steps 2 --batch-size ";
  // An MPMD launch: each rank its own command line.
  auto mpmd = [&](const std::string& rank0, const std::string& rank1) {
    return test::run_command("timeout -k 10 120 " + test::mpiexec() + " --oversubscribe --bind-to none -n 1 " + rank0 +
                             " : -n 1 " + rank1 + " 2>&1");
  };
  auto result = mpmd(rank_command + "4", rank_command + "8");
  EXPECT_NE(result.exit_status, 0);
  EXPECT_NE(result.output.find("rank 1 differs from rank 0: --batch-size = 8 (rank 0: 4)"), std::string::npos) << result.output;
  EXPECT_FALSE(fs::exists(runs.file("out/results.json")));
  // Options that decide when a collective runs (the losses' sum at logging steps) or what the
  // ranks write together, refused by name with both values, not left to hang.
  for (const auto& [option, rank0, rank1] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--logging-steps", "1", "2"}, {"--save-total-limit", "1", "3"}, {"--n-best-size", "20", "5"}}) {
    result = mpmd(rank_command + "4 " + option + " " + rank0, rank_command + "4 " + option + " " + rank1);
    EXPECT_NE(result.exit_status, 0) << option;
    EXPECT_NE(result.output.find("rank 1 differs from rank 0: " + option + " = " + rank1 + " (rank 0: " + rank0 + ")"),
              std::string::npos)
        << result.output;
  }
  // `mpibert eval` splits the batches over the ranks: a rank with another --batch-size would
  // gather logits the others do not expect.
  const auto trained = train(0, runs.file("model"), "--batch-size 8 --max-steps 1");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  const std::string eval_command = test::bin_dir() + "/mpibert eval --model " + checkpoint(runs.file("model"), 1) + " --data " +
                                   data_->file("eval") + " --output-dir " + runs.file("eval") + " --threads 1 --batch-size ";
  result = mpmd(eval_command + "4", eval_command + "8");
  EXPECT_NE(result.exit_status, 0);
  EXPECT_NE(result.output.find("rank 1 differs from rank 0: --batch-size = 8 (rank 0: 4)"), std::string::npos) << result.output;
  EXPECT_FALSE(fs::exists(runs.file("eval/eval_results.json")));
}

TEST_F(DataParallelRun, DeviceAndCommunicatorChoicesTheMachineCannotServeAreRefused) {
  test::TempDir runs;
  // NCCL reduces CUDA tensors only.
  auto nccl_on_cpu = train(2, runs.file("nccl"), "--batch-size 4 --max-steps 2 --device cpu --comm nccl");
  EXPECT_NE(nccl_on_cpu.exit_status, 0);
  EXPECT_NE(nccl_on_cpu.output.find("--comm: nccl: NCCL reduces CUDA tensors"), std::string::npos) << nccl_on_cpu.output;
  EXPECT_FALSE(fs::exists(runs.file("nccl/results.json")));
  if (!torch::cuda::is_available()) {  // where a GPU is visible, --device cuda is served
    auto no_gpu = train(2, runs.file("cuda"), "--batch-size 4 --max-steps 2 --device cuda");
    EXPECT_NE(no_gpu.exit_status, 0);
    EXPECT_NE(no_gpu.output.find("--device: cuda: no CUDA GPU is visible to this process"), std::string::npos) << no_gpu.output;
    EXPECT_FALSE(fs::exists(runs.file("cuda/results.json")));
  }
  auto cpu = train(2, runs.file("cpu"), "--batch-size 4 --max-steps 2 --device cpu --comm mpi");
  ASSERT_EQ(cpu.exit_status, 0) << cpu.output;
  const auto results = nlohmann::json::parse(read_file(runs.file("cpu/results.json")));
  EXPECT_EQ(results["environment"]["devices"]["type"], "cpu");
  EXPECT_EQ(results["parallel"]["communication"], "mpi");
}

// Two ranks on two GPUs with NCCL end where one rank with the same global batch does (as the CPU
// runs above); ddp and zero1.
TEST_F(DataParallelRun, TwoGpuRanksWithNcclMatchOneRank) {
  const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (gpus < 2) GTEST_SKIP() << "needs 2 CUDA GPUs; this machine has " << gpus;
  test::TempDir runs;
  auto one = train(0, runs.file("one"), "--batch-size 8 --max-steps 3 --device cuda");
  ASSERT_EQ(one.exit_status, 0) << one.output;
  for (const char* strategy : kStrategies) {
    auto two = train(2, runs.file(strategy),
                     std::string("--batch-size 4 --max-steps 3 --device cuda --comm nccl --strategy ") + strategy);
    ASSERT_EQ(two.exit_status, 0) << two.output;
    EXPECT_LE(max_difference(checkpoint(runs.file("one"), 3) + "/model.safetensors",
                             checkpoint(runs.file(strategy), 3) + "/model.safetensors"),
              1e-5)
        << strategy;
    const auto results = nlohmann::json::parse(read_file(runs.file(std::string(strategy) + "/results.json")));
    EXPECT_EQ(results["parallel"]["communication"], "nccl");
  }
}

TEST_F(DataParallelRun, AFailingRankEndsTheWholeJobWithItsMessage) {
  test::TempDir runs;
  const auto start = Clock::now();
  auto result = train(2, runs.file("run"), "--batch-size 4 --max-steps 20", "MPIBERT_INJECT_FAILURE=1:2");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(result.exit_status, 0);
  EXPECT_NE(result.output.find("[rank 1] [error] injected failure at step 2"), std::string::npos) << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
  EXPECT_FALSE(fs::exists(runs.file("run/results.json")));
}

// A failure with gradient buckets in flight (an out-of-memory in backward, say): the failing
// rank leaves its communicator without waiting on its peers and ends the job with its own
// message, long before the collective timeout would blame a stuck rank.
TEST_F(DataParallelRun, AFailureWithCollectivesInFlightEndsTheJobPromptlyWithItsMessage) {
  for (const char* strategy : kStrategies) {
    test::TempDir runs;
    const auto start = Clock::now();
    auto result = train(2, runs.file("run"),
                        std::string("--batch-size 4 --max-steps 20 --collective-timeout 60 --strategy ") + strategy,
                        "MPIBERT_INJECT_FAILURE=1:2:backward");
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_NE(result.exit_status, 0) << strategy;
    EXPECT_NE(result.output.find("[rank 1] [error] injected failure at step 2 after backward"), std::string::npos)
        << strategy << "\n"
        << result.output;
    EXPECT_EQ(result.output.find("collective timed out"), std::string::npos) << strategy << "\n" << result.output;
    EXPECT_LT(seconds, 30.0) << strategy << "\n" << result.output;
    EXPECT_FALSE(fs::exists(runs.file("run/results.json"))) << strategy;
  }
}

// Ranks that resolved different kinds of device (one rank's --device auto fell back to the CPU,
// here injected as a rank claiming a GPU) are refused before any collective on tensors, rank 0
// naming every rank's device.
TEST_F(DataParallelRun, RanksOnDifferentKindsOfDeviceAreRefusedBeforeAnyCollective) {
  test::TempDir runs;
  const auto start = Clock::now();
  auto result = train(2, runs.file("run"), "--batch-size 4 --max-steps 4", "MPIBERT_INJECT_DEVICE=1:cuda:0");
  EXPECT_NE(result.exit_status, 0);
  EXPECT_NE(result.output.find("[rank 0] [error] --device: auto: the ranks resolved different kinds of device: cpu on " +
                               host_name() + " (rank 0), cuda:0 on " + host_name() + " (rank 1)"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("[rank 1] [error]"), std::string::npos) << "rank 0 alone reports it\n" << result.output;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30.0) << result.output;
  EXPECT_FALSE(fs::exists(runs.file("run/results.json")));
}

// Two ranks on one GPU (injected: both claim cuda:0 of this host): --comm nccl is refused naming
// them, --comm auto reduces through MPI with a warning.
TEST_F(DataParallelRun, RanksSharingAGpuAreRefusedByNcclAndReducedThroughMpiUnderAuto) {
  test::TempDir runs;
  const std::string both_on_gpu0 = "MPIBERT_INJECT_DEVICE=0:cuda:0,1:cuda:0";
  auto nccl = train(2, runs.file("nccl"), "--batch-size 4 --max-steps 2 --comm nccl", both_on_gpu0);
  EXPECT_NE(nccl.exit_status, 0);
  EXPECT_NE(nccl.output.find("--comm: nccl: ranks 0 and 1 share cuda:0 on " + host_name()), std::string::npos) << nccl.output;
  auto automatic = train(2, runs.file("auto"), "--batch-size 4 --max-steps 2", both_on_gpu0);
  ASSERT_EQ(automatic.exit_status, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("[warning] --comm auto: ranks 0 and 1 share cuda:0 on " + host_name()), std::string::npos)
      << automatic.output;
  EXPECT_EQ(nlohmann::json::parse(read_file(runs.file("auto/results.json")))["parallel"]["communication"], "mpi");
}

TEST_F(DataParallelRun, AHungRankIsReportedByTheCollectiveTimeout) {
  test::TempDir runs;
  const auto start = Clock::now();
  auto result = train(2, runs.file("run"), "--batch-size 4 --max-steps 20 --collective-timeout 3", "MPIBERT_INJECT_HANG=1:2");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(result.exit_status, 0);
  // Rank 0 waits for rank 1 in step 2's first collective, the all-reduce of the embedding rows
  // touched (issued as backward starts), and says so; its probe finds rank 1's process alive
  // (hung, not gone).
  EXPECT_NE(result.output.find("[rank 0] [error] collective timed out after 3 s (--collective-timeout 3) on rank 0 (" +
                               host_name() + ") while waiting for all-reduce of the word embedding rows touched"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("[rank 0] [error] rank 0: every other rank's process answers a probe, so one of them is "
                               "stuck rather than gone: ending the job"),
            std::string::npos)
      << result.output;
  EXPECT_LT(seconds, 30.0) << result.output;
}

TEST_F(DataParallelRun, ASignalOnOneRankCheckpointsEveryRankAndAsksForARequeue) {
  test::TempDir runs;
  auto stopped = train(2, runs.file("run"), "--batch-size 4 --max-steps 6 --strategy zero1", "MPIBERT_INJECT_SIGNAL=1:2");
  EXPECT_EQ(stopped.exit_status, 75) << stopped.output;  // kExitRequeue
  EXPECT_NE(stopped.output.find("stopping at step 3 on a signal"), std::string::npos) << stopped.output;
  ASSERT_TRUE(fs::exists(checkpoint(runs.file("run"), 3) + "/rank-1.safetensors")) << stopped.output;
  auto resumed = train(2, runs.file("run"), "--batch-size 4 --max-steps 6 --strategy zero1 --resume auto");
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_TRUE(fs::exists(checkpoint(runs.file("run"), 6)));
}

}  // namespace
}  // namespace mpibert
