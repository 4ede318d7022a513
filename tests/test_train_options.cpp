// Every option of `mpibert train` checked before any work: each bad value of the table is refused
// with exit status 1, a message naming the option and what it accepts, and nothing written (the
// run directory is not even made). Then the checks that need the data (an epoch shorter than an
// accumulation window, evaluation shards of another sequence length or vocabulary) and the run
// directory (an earlier run is neither continued nor replaced unless asked).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/core/io.hpp"
#include "mpibert/train/option_checks.hpp"
#include "mpibert/train/train_options.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

namespace fs = std::filesystem;

struct BadOption {
  std::string options;  // added to a command line that otherwise runs
  std::string message;  // what the refusal must say
};

class TrainOptions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    test::prepare_shards(data_->file("train"), test::squad_v1_path(), 0, 24, "train");
    test::prepare_shards(data_->file("eval"), test::squad_v1_path(), 24, 8, "eval");
    test::prepare_shards(data_->file("train-v2"), test::squad_v2_path(), 0, 24, "train");
    // Evaluation shards of another tokenizer: the manifest records another digest.
    test::prepare_shards(data_->file("eval-other-vocab"), test::squad_v1_path(), 24, 8, "eval");
    auto manifest = nlohmann::json::parse(read_file(data_->file("eval-other-vocab/manifest.json")));
    manifest["tokenizer"]["sha256"] = std::string(64, '0');
    manifest["tokenizer"]["path"] = "other/vocab.txt";
    test::write_text(data_->file("eval-other-vocab/manifest.json"), manifest.dump());
    // Evaluation shards of another sequence length, as mpibert-prep makes them.
    const std::string prep = test::bin_dir() + "/mpibert-prep ";
    auto split = test::run_command(prep + "split " + test::squad_v1_path() + " --articles 5:6 --out " + data_->file("eval.json") +
                                   " 2>&1");
    ASSERT_EQ(split.exit_status, 0) << split.output;
    auto prepared =
        test::run_command(prep + "--input " + data_->file("eval.json") + " --vocab " + test::vocab_path() + " --out " +
                          data_->file("eval-256") + " --split eval --max-seq-length 256 --log-level warn 2>&1");
    ASSERT_EQ(prepared.exit_status, 0) << prepared.output;
    test::write_text(data_->file("huge.toml"), "[train]\nsave-steps = 99999999999999999999\n");
  }
  static void TearDownTestSuite() { delete data_; }

  // `mpibert train` of the fixture's tiny model into `out`, with `extra` options (which replace
  // the defaults of the same name: an option given twice is an error of its own).
  static test::CommandResult train(const std::string& out, const std::string& extra) {
    std::string defaults;
    for (const std::string& option :
         std::vector<std::string>{"--threads 1", "--max-steps 1", "--batch-size 4", "--train-shards " + data_->file("train")})
      if (extra.find(option.substr(0, option.find(' ')) + " ") == std::string::npos) defaults += " " + option;
    return test::run_command("timeout -k 10 120 " + test::bin_dir() + "/mpibert train --model-config " + test::fixtures_dir() +
                             "/model/config.json --vocab " + test::vocab_path() + " --output-dir " + out + defaults +
                             " --log-level warn " + extra + " 2>&1");
  }

  // Each row, run into a directory of its own: exit status 1, the message, and no directory made.
  static void expect_each_refused(const std::vector<BadOption>& table) {
    test::TempDir runs;
    int row = 0;
    for (const BadOption& bad : table) {
      SCOPED_TRACE(bad.options);
      const std::string out = runs.file("run-" + std::to_string(row++));
      const test::CommandResult result = train(out, bad.options);
      EXPECT_EQ(result.exit_status, 1) << result.output;
      EXPECT_NE(result.output.find(bad.message), std::string::npos) << result.output;
      EXPECT_FALSE(fs::exists(out)) << "the refused run made its directory";
    }
  }

  static test::TempDir* data_;
};
test::TempDir* TrainOptions::data_ = nullptr;

TEST_F(TrainOptions, EveryBadValueIsRefusedByNameBeforeAnythingIsWritten) {
  const std::vector<BadOption> table = {
      {"--batch-size 0", "--batch-size: 0: must be at least 1"},
      {"--batch-size -3", "--batch-size: -3: must be at least 1"},
      {"--gradient-accumulation 0", "--gradient-accumulation: 0: must be at least 1"},
      {"--eval-batch-size 0", "--eval-batch-size: 0: must be at least 1"},
      {"--max-steps -1", "--max-steps: -1: must be at least 0"},
      {"--max-steps 0 --epochs 0", "--epochs: 0: must be a finite number above 0"},
      {"--max-steps 0 --epochs -2", "--epochs: -2: must be a finite number above 0"},
      {"--learning-rate 0", "--learning-rate: 0: must be a finite number above 0"},
      {"--learning-rate -1e-05", "--learning-rate: -1e-05: must be a finite number above 0"},
      {"--weight-decay 1.5", "--weight-decay: 1.5: must be within [0, 1]"},
      {"--weight-decay -0.1", "--weight-decay: -0.1: must be within [0, 1]"},
      {"--warmup-ratio 1.5", "--warmup-ratio: 1.5: must be within [0, 1]"},
      {"--warmup-ratio -0.5", "--warmup-ratio: -0.5: must be within [0, 1]"},
      {"--warmup-steps -1", "--warmup-steps: -1: must be at least 0"},
      {"--lr-scheduler-type reduce_lr_on_plateau", "--lr-scheduler-type: reduce_lr_on_plateau not in {linear,cosine,"},
      {"--lr-scheduler-type cosine --lr-scheduler-kwargs '{\"num_cycle\":2}'",
       "--lr-scheduler-kwargs: {\"num_cycle\":2}: num_cycle: not a parameter of cosine (it takes num_cycles)"},
      {"--lr_scheduler_type cosine_with_restarts --lr_scheduler_kwargs '{\"num_cycles\":\"x\"}'",
       "--lr-scheduler-kwargs: {\"num_cycles\":\"x\"}: num_cycles: must be a number, not \"x\""},
      {"--lr-scheduler-type cosine --lr-scheduler-kwargs 2", "--lr-scheduler-kwargs: 2: must be a JSON object"},
      // Strings of digits are numbers to HF: beyond int64 or double they are refused by key, not by "stoll".
      {"--lr-scheduler-type cosine_with_min_lr --lr-scheduler-kwargs '{\"min_lr\":\"99999999999999999999\"}'",
       "--lr-scheduler-kwargs: {\"min_lr\":\"99999999999999999999\"}: min_lr: \"99999999999999999999\" is out of range"},
      {"--lr-scheduler-type cosine --lr-scheduler-kwargs '{\"num_cycles\":\"" + std::string(400, '9') + ".5\"}'",
       "num_cycles: \"" + std::string(400, '9') + ".5\" is out of range"},
      {"--lr-scheduler-type cosine --lr-scheduler-kwargs '{\"num_cycles\":1e999}'",
       "--lr-scheduler-kwargs: {\"num_cycles\":1e999}: "},
      {"--lr-scheduler-type warmup_stable_decay", "--lr-scheduler-kwargs: num_decay_steps: required by warmup_stable_decay"},
      {"--lr-scheduler-type polynomial --learning-rate 1e-07",
       "--lr-scheduler-kwargs: lr_end: 1e-07 must be below the learning rate 1e-07"},
      {"--max-grad-norm -1", "--max-grad-norm: -1: must be at least 0"},
      // Whole numbers beyond their type, negative into an unsigned, or not decimal: refused by name,
      // never saturated, wrapped or read as octal or hex (CLI11's strtoll base 0).
      {"--batch-size 99999999999999999999",
       "--batch-size: 99999999999999999999 is out of range (-9223372036854775808 to 9223372036854775807)"},
      {"--seed -1", "--seed: -1 must be at least 0"},
      {"--max-steps 0x10", "--max-steps: 0x10 is not a decimal number"},
      {"--max-steps ' 010'", "--max-steps: ' 010' has white space in it: give the number alone"},
      {"--max-steps ' 0x10'", "--max-steps: ' 0x10' has white space in it"},
      {"--batch-size '8 '", "--batch-size: '8 ' has white space in it"},
      {"--config " + data_->file("huge.toml"), "--save-steps: 99999999999999999999 is out of range"},
      {"--logging-steps -1", "--logging-steps: -1: must be at least 0"},
      {"--save-steps -1", "--save-steps: -1: must be at least 0"},
      {"--save-total-limit -1", "--save-total-limit: -1: must be at least 0"},
      {"--eval-steps -1", "--eval-steps: -1: must be at least 0"},
      {"--eval-steps 5", "--eval-steps: 5: evaluates on --eval-shards, which is not given"},
      {"--stop-after-steps -1", "--stop-after-steps: -1: must be at least 0"},
      {"--max-seq-length -1", "--max-seq-length: -1: must be at least 0"},
      {"--doc-stride -1", "--doc-stride: -1: must be at least 0"},
      {"--n-best-size 0", "--n-best-size: 0: must be at least 1"},
      {"--max-answer-length 0", "--max-answer-length: 0: must be at least 1"},
      {"--bucket-mb 0", "--bucket-mb: 0: must be a finite number above 0"},
      {"--profile-active 0", "--profile-active: 0: must be at least 1"},
      {"--profile-wait -1", "--profile-wait: -1: must be at least 0"},
      {"--threads -1", "--threads: -1: must be at least 0"},
      {"--collective-timeout -5", "--collective-timeout: -5.000000: must be at least 0"},
      {"--strategy zero9", "--strategy: zero9 not in {ddp,zero1,zero2,fsdp,hsdp}"},
      {"--cuda-graphs --device cpu --padding packed", "--cuda-graphs: CUDA graphs need a GPU"},
      {"--cuda-graphs --padding packed --gradient-checkpointing",
       "--cuda-graphs: activation checkpointing's recompute reads the CUDA generator's state"},
      {"--device tpu", "--device: tpu not in {auto,cpu,cuda}"},
      {"--comm gloo", "--comm: gloo not in {auto,mpi,nccl}"},
      {"--padding some", "--padding: some not in {dynamic,full,packed}"},
      {"--mpi-collectives tree", "--mpi-collectives: tree not in {ring,openmpi}"},
      {"--embedding-exchange rows", "--embedding-exchange: rows not in {sparse,dense}"},
      {"--optim sgd", "--optim: sgd not in {adamw_torch,adamw_torch_fused}"},
      {"--reduce-dtype fp16", "--reduce-dtype: fp16 not in {fp32,bf16}"},
      // An option only some strategies read, set for another: one rule for all of them (their rows' lists).
      {"--param-dtype bf16", "--param-dtype: bf16: read by --strategy fsdp or hsdp only; ddp does not read it"},
      {"--param-dtype bf16 --strategy zero2", "--param-dtype: bf16: read by --strategy fsdp or hsdp only; zero2 does not"},
      {"--keep-gathered-for-backward --strategy zero1",
       "--keep-gathered-for-backward: read by --strategy fsdp or hsdp only; zero1 does not read it"},
      {"--shard-group-size 2", "--shard-group-size: 2: read by --strategy hsdp only; ddp does not read it"},
      {"--embedding-exchange dense --strategy zero1",
       "--embedding-exchange: dense: read by --strategy ddp only; zero1 does not read it"},
      {"--embedding-exchange dense --strategy fsdp", "--embedding-exchange: dense: read by --strategy ddp only; fsdp does"},
      {"--strategy hsdp --shard-group-size -1", "--shard-group-size: -1: must be at least 0 (0: the ranks of a node)"},
      {"--overwrite-output-dir --resume auto", "--overwrite-output-dir replaces the run that --resume auto would continue"},
      {"--do_eval", "--do_eval needs --eval-shards"},
      // HF's names of the same options, and what they accept.
      {"--warmup_steps 0.1",
       "--warmup-steps: 0.1: a whole number of steps; for a fraction of the training steps give --warmup-ratio 0.1"},
      {"--warmup_steps 1.5e0", "--warmup-steps: 1.5e0: a whole number of steps"},
      {"--warmup_steps 1e3x", "--warmup-steps: 1e3x: a whole number of steps"},
      {"--max_grad_norm -1", "--max-grad-norm: -1: must be at least 0"},
      {"--report_to comet_ml",
       "--report-to: comet_ml: not a tracker mpibert reports to (tensorboard, mlflow, wandb; or all, or none)"},
      {"--report-to wandbx", "--report-to: wandbx: not a tracker mpibert reports to"},
      {"--report-to none,mlflow", "--report-to: none,mlflow: none stands alone"},
      {"--report-to tensorboard,all", "--report-to: tensorboard,all: all stands alone"},
      {"--eval_strategy sometimes", "--eval-strategy: sometimes not in {steps,epoch,no}"},
      {"--eval_strategy epoch", "--eval-strategy: epoch: evaluates on --eval-shards, which is not given"},
      {"--eval_strategy steps --logging_steps 0", "--eval-strategy steps: give --eval-steps (HF falls back to --logging-steps"},
      {"--save_strategy no --save_steps 5",
       "--save-steps: 5: applies with --save-strategy steps, and this run has --save-strategy no: give one of them"},
      {"--eval-shards " + data_->file("eval") + " --eval_strategy epoch --eval_steps 3",
       "--eval-steps: 3: applies with --eval-strategy steps, and this run has --eval-strategy epoch"},
      {"--dataloader_num_workers -1", "--dataloader-num-workers: -1: must be at least 0"},
      {"--dataset_name squad",
       "--dataset_name: squad: mpibert downloads no datasets (no network): prepare shards with mpibert-prep"},
      {"--train_file train.json",
       "--train_file: train.json: mpibert trains on shards: prepare them with mpibert-prep --input train.json --split train"},
      {"--validation_file dev.json", "--validation_file: dev.json: mpibert evaluates on shards: prepare them with mpibert-prep"},
  };
  expect_each_refused(table);
}

TEST_F(TrainOptions, DataThatDoesNotFitIsRefusedBeforeTheRunDirectoryIsWritten) {
  test::TempDir runs;
  const std::vector<BadOption> table = {
      // 24 features give 6 micro-batches of 4: an accumulation window of 8 never fills.
      {"--gradient-accumulation 8",
       "--gradient-accumulation: 8: an optimizer step needs that many micro-batches, but an epoch "
       "gives rank 0 only 6 (24 of the 24 features in batches of 4)"},
      {"--eval-shards " + data_->file("eval-256"), "prepared with max_seq_length 256, the training shards with 384"},
      {"--eval-shards " + data_->file("eval-other-vocab"), "manifest.json: prepared with another tokenizer (WordPiece"},
      // run_qa's --version_2_with_negative against what the shards hold, naming both.
      {"--version_2_with_negative", "--version-2-with-negative asks for SQuAD v2.0, but " + data_->file("train") +
                                        " (prepared from " + test::squad_v1_path() + ") holds no question without an answer"},
      {"--version_2_with_negative --train-shards " + data_->file("train-v2") + " --eval-shards " + data_->file("eval"),
       "--version-2-with-negative asks for SQuAD v2.0, but " + data_->file("eval") + " (prepared from"},
      {"--train-shards " + data_->file("train-v2"),
       " questions without an answer (SQuAD v2.0), and --version-2-with-negative "
       "is not given: add it (run_qa's --version_2_with_negative)"},
  };
  expect_each_refused(table);
  const test::CommandResult v2 = train(runs.file("v2"), "--version_2_with_negative --train-shards " + data_->file("train-v2"));
  EXPECT_EQ(v2.exit_status, 0) << v2.output;
  const test::CommandResult fits =
      train(runs.file("fits"), "--eval-shards " + data_->file("eval") + " --gradient-accumulation 2");
  EXPECT_EQ(fits.exit_status, 0) << fits.output;
}

// A whole number of warmup steps however written (run_qa users write 1e3), recorded as the integer.
TEST_F(TrainOptions, WarmupStepsAreAWholeNumberHoweverWritten) {
  test::TempDir runs;
  int row = 0;
  for (const char* written : {"1e3", "1000.0", "1000", "0.0"}) {
    SCOPED_TRACE(written);
    const std::string out = runs.file("run-" + std::to_string(row++));
    const test::CommandResult result = train(out, std::string("--warmup_steps ") + written);
    ASSERT_EQ(result.exit_status, 0) << result.output;
    const std::string expected = std::string(written) == "0.0" ? "warmup-steps=0" : "warmup-steps=1000";
    EXPECT_NE(read_file(out + "/train_config.toml").find(expected), std::string::npos) << read_file(out + "/train_config.toml");
  }
}

TEST_F(TrainOptions, AnEarlierRunIsContinuedOrReplacedOnlyWhenAskedTo) {
  test::TempDir runs;
  const std::string out = runs.file("run");
  ASSERT_EQ(train(out, "--max-steps 2").exit_status, 0);
  const std::string results = read_file(out + "/results.json");
  const test::CommandResult again = train(out, "--max-steps 2");
  EXPECT_EQ(again.exit_status, 1) << again.output;
  EXPECT_NE(again.output.find("--output-dir: " + out +
                              ": holds an earlier run (metrics.jsonl, results.json, checkpoint-2): "
                              "continue it with --resume auto"),
            std::string::npos)
      << again.output;
  EXPECT_EQ(read_file(out + "/results.json"), results) << "the refused run changed the earlier one";

  // Replaced: only the new run's records remain (one step, its own checkpoint).
  const test::CommandResult replaced = train(out, "--max-steps 1 --overwrite_output_dir");
  ASSERT_EQ(replaced.exit_status, 0) << replaced.output;
  EXPECT_EQ(test::read_lines(out + "/metrics.jsonl").size(), 1u);
  EXPECT_FALSE(fs::exists(out + "/checkpoint-2"));
  EXPECT_TRUE(fs::exists(out + "/checkpoint-1"));
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/results.json"))["global_step"], 1);
  // Continued: --resume auto from checkpoint-1 to step 2.
  const test::CommandResult continued = train(out, "--max-steps 2 --resume auto");
  ASSERT_EQ(continued.exit_status, 0) << continued.output;
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/results.json"))["resumed_from_step"], 1);
}

// A whole number written with a leading zero is decimal, as people mean it (CLI11 alone reads
// "010" as octal 8): the run takes 10 steps.
TEST_F(TrainOptions, LeadingZerosAreDecimal) {
  test::TempDir run;
  const test::CommandResult result = train(run.file("out"), "--max-steps 010");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_EQ(nlohmann::json::parse(read_file(run.file("out/results.json")))["global_step"], 10);
}

// An option left out of the run description that ranks compare at the start must be provably
// local: deciding no collective and nothing the ranks produce together (a per-rank --logging-steps
// once hung the ranks in the losses' sum). This list is that decision, made field by field; a new
// option fails here until it is described or added with its reason (train_options.hpp).
TEST(TrainOptionRecords, OnlyProvablyLocalOptionsAreLeftOutOfTheRunDescription) {
  const mpibert::TrainOptions options;
  std::set<std::string> local;
  for_each_train_option(options, [&](const TrainOptionField& field, const auto&) {
    if (!(field.records & kDescribed)) local.insert(field.name);
  });
  const std::set<std::string> expected = {
      "model_config",
      "tokenizer",  // described by their content
      "max_seq_length",
      "doc_stride",              // each rank checks its shards against them
      "report_to",               // rank 0 alone reports
      "run_name",                // rank 0's trackers alone name the run
      "dataloader_num_workers",  // accepted, unused
      "profile",
      "profile_wait",
      "profile_warmup",
      "profile_active"  // each rank's own trace
  };
  EXPECT_EQ(local, expected);
  const auto label = train_option_labels(options);
  EXPECT_EQ(label("logging_steps"), "--logging-steps");
  EXPECT_EQ(label("save_total_limit"), "--save-total-limit");
  EXPECT_EQ(label("train_manifest_sha256"), "");
}

}  // namespace
}  // namespace mpibert
