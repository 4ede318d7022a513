// The command line as a user reads it: every option of every `mpibert` subcommand has a
// description and a section of --help; `eval` takes `train`'s names for the same things; the
// version is printed by --version and recorded by `env`.
#include <gtest/gtest.h>

#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/parallel/strategies.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& name : names) all += "\n  " + name;
  return all;
}

TEST(Cli, EveryOptionOfEverySubcommandIsDescribedUnderAHeading) {
  CLI::App app{"mpibert"};
  TextCommands text_commands(app);
  ModelCommands model_commands(app);
  CLI::App probe;
  const std::string default_group = probe.add_flag("--probe")->get_group();  // where CLI11 puts an option given none
  std::vector<std::string> undescribed, ungrouped, subcommands;
  size_t options = 0;
  for (const CLI::Option* option : app.get_options())
    if (option->get_description().empty()) undescribed.push_back(option->get_name());
  for (const CLI::App* command : app.get_subcommands({})) {
    subcommands.push_back(command->get_name());
    for (const CLI::Option* option : command->get_options()) {
      ++options;
      const std::string name = command->get_name() + " " + option->get_name();
      if (option->get_description().empty()) undescribed.push_back(name);
      if (option != command->get_help_ptr() && option->get_group() == default_group) ungrouped.push_back(name);
    }
  }
  EXPECT_EQ(joined(subcommands), joined({"tokenize", "score", "train", "eval", "predict", "env", "strategies"}));
  EXPECT_GT(options, 90u);  // the walk saw train's options, not an empty list
  EXPECT_TRUE(undescribed.empty()) << "options without a description:" << joined(undescribed);
  EXPECT_TRUE(ungrouped.empty()) << "options under no heading:" << joined(ungrouped);
  const std::string help = app.get_subcommand("train")->help();
  for (const char* heading :
       {"Data:", "Model:", "Training:", "Schedule:", "Precision:", "Parallelism:", "Checkpoints:", "Evaluation:", "Logging:"})
    EXPECT_NE(help.find(std::string("\n") + heading), std::string::npos) << heading << " not in\n" << help;
}

// The strategy table is the one source: --strategy takes its names and its help gives each row's
// line, and the README's table of strategies is the one the rows make.
TEST(Cli, StrategiesComeFromTheirTable) {
  CLI::App app{"mpibert"};
  ModelCommands model_commands(app);
  const CLI::Option* strategy = app.get_subcommand("train")->get_option("--strategy");
  const std::string help = strategy->get_description();
  for (const StrategyRow& row : strategy_table()) {
    EXPECT_NE(help.find(row.name), std::string::npos) << help;
    EXPECT_NE(help.find(row.description), std::string::npos) << help;
  }
  EXPECT_EQ(strategy->get_default_str(), strategy_table().front().name);
  const std::string readme = read_file(std::string(MPIBERT_TESTS_SOURCE_DIR) + "/../README.md");
  EXPECT_NE(readme.find(strategy_table_markdown()), std::string::npos)
      << "README.md's strategy table is not the table's; it should read:\n"
      << strategy_table_markdown();
}

// `mpibert strategies --json`, what the job scripts and tools read: every row, its fields, and the
// options it reads by their flags; the text form names each strategy.
TEST(Cli, StrategiesCommandPrintsEveryRowAndTheOptionsItReads) {
  std::ostringstream json, text;
  EXPECT_EQ(strategies_command(true, json), 0);
  EXPECT_EQ(strategies_command(false, text), 0);
  const nlohmann::json rows = nlohmann::json::parse(json.str());
  ASSERT_EQ(rows.size(), strategy_table().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const StrategyRow& row = strategy_table()[i];
    EXPECT_EQ(rows[i]["name"], row.name);
    EXPECT_EQ(rows[i]["default"], i == 0);
    EXPECT_EQ(rows[i]["reads"].size(), row.reads.size()) << row.name;
    for (const char* key : {"known_as", "description", "parameters", "gradients", "optimizer_state", "pick_it_when"})
      EXPECT_TRUE(rows[i][key].is_string()) << row.name << " " << key;
    EXPECT_NE(text.str().find(row.name + (i == 0 ? " (default)" : "")), std::string::npos) << text.str();
  }
  EXPECT_EQ(rows[0]["reads"], nlohmann::json::array({"--embedding-exchange"}));
  EXPECT_EQ(rows.back()["reads"], nlohmann::json::array({"--param-dtype", "--keep-gathered-for-backward", "--shard-group-size"}));
}

// A kept unit saves a gather per micro-batch (each micro-batch gathers for its forward and its
// backward), which is what the help must say.
TEST(Cli, KeepGatheredForBackwardSaysPerMicroBatch) {
  CLI::App app{"mpibert"};
  ModelCommands model_commands(app);
  const std::string help = app.get_subcommand("train")->get_option("--keep-gathered-for-backward")->get_description();
  EXPECT_NE(help.find("per unit and micro-batch"), std::string::npos) << help;
}

TEST(Cli, EvalTakesTrainsNamesForTheSameThings) {
  CLI::App app{"mpibert"};
  ModelCommands model_commands(app);
  const CLI::App* train = app.get_subcommand("train");
  const CLI::App* eval = app.get_subcommand("eval");
  for (const char* name : {"--eval-shards",
                           "--eval_shards",
                           "--eval-batch-size",
                           "--per_device_eval_batch_size",
                           "--model",
                           "--model_name_or_path",
                           "--output-dir",
                           "--output_dir",
                           "--padding",
                           "--n-best-size",
                           "--n_best_size",
                           "--max-answer-length",
                           "--max_answer_length",
                           "--null-score-diff-threshold",
                           "--null_score_diff_threshold",
                           "--version-2-with-negative",
                           "--version_2_with_negative",
                           "--device",
                           "--threads",
                           "--log-level"}) {
    EXPECT_NE(train->get_option_no_throw(name), nullptr) << "train has no " << name;
    EXPECT_NE(eval->get_option_no_throw(name), nullptr) << "eval has no " << name;
  }
}

TEST(Cli, VersionIsPrintedAndRecordedByEnv) {
  const std::string mpibert = test::bin_dir() + "/mpibert";
  const test::CommandResult version = test::run_command(mpibert + " --version");
  ASSERT_EQ(version.exit_status, 0) << version.output;
  EXPECT_EQ(version.output.rfind(std::string("mpibert ") + MPIBERT_VERSION + " (git ", 0), 0u) << version.output;
  const test::CommandResult environment = test::run_command(mpibert + " env --device cpu 2>/dev/null");
  ASSERT_EQ(environment.exit_status, 0) << environment.output;
  const auto described = nlohmann::json::parse(environment.output);
  EXPECT_EQ(described["mpibert"], MPIBERT_VERSION);
  EXPECT_NE(version.output.find(described["git_commit"].get<std::string>()), std::string::npos) << version.output;
}

}  // namespace
}  // namespace mpibert
