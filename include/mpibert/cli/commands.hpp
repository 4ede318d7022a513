// Subcommands of the `mpibert` binary, callable from tests.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "mpibert/text/hf_tokenizer.hpp"

namespace CLI {
class App;
}

namespace mpibert {

// `mpibert tokenize`: one JSON object per input line, {"tokens", "ids", "offsets"} for the text
// alone (no special tokens); offsets are [begin, end) code points. Returns the exit status:
// a line that is not UTF-8 is reported on `err` with its line number and gives 1.
int tokenize_lines(const HfTokenizer& tokenizer, std::istream& in, std::ostream& out, std::ostream& err);

// `mpibert score --dataset F --predictions P [--na-prob-file N] [--na-prob-thresh T] [--out-file O]`:
// prints to `out` and `err` exactly what the official script for the dataset's version prints
// (v1.1: one JSON line; v2.0: indented JSON, or compact JSON written to out_file without a
// newline). An empty na_prob_file / out_file means the option was not given; for v1.1 datasets an
// out_file receives the compact line instead of stdout, and an na_prob_file is an error.
// Returns the exit status: bad input is reported on `err` and gives 1.
int score_command(const std::string& dataset_path, const std::string& predictions_path, const std::string& na_prob_path,
                  double na_prob_thresh, const std::string& out_file, std::ostream& out, std::ostream& err);

// `mpibert tokenize` and `mpibert score`, registered on `app` with their options.
class TextCommands {
 public:
  explicit TextCommands(CLI::App& app);
  ~TextCommands();
  bool parsed() const;
  int run();  // exit status

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `mpibert strategies [--json]`: every row of the strategy table (parallel/strategies.hpp): its
// name, description, what a rank holds, when to pick it and the options only it (and strategies
// like it) read; as text, or as a JSON array of those fields. Returns the exit status.
int strategies_command(bool json, std::ostream& out);

// The subcommands that need LibTorch (and `mpibert --version`):
//   `mpibert train`: every option on the command line or in a config file (--config FILE); the
//       resolved configuration is written into the run directory as train_config.toml;
//   `mpibert eval --model DIR --data SHARDS --output-dir OUT`: prediction files and metrics;
//   `mpibert predict --model DIR --context TEXT --question TEXT`: the answer, its score and span;
//   `mpibert env [--device D]`: the device a run would use and the library versions, as JSON.
class ModelCommands {
 public:
  explicit ModelCommands(CLI::App& app);  // registers the subcommands and their options
  ~ModelCommands();
  bool parsed() const;
  int run();  // exit status

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpibert
