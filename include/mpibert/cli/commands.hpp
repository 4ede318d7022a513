// Subcommands of the `mpibert` binary, callable from tests.
#pragma once

#include <iosfwd>
#include <memory>

#include "mpibert/tokenizer.hpp"

namespace CLI {
class App;
}

namespace mpibert {

// `mpibert tokenize`: one JSON object per input line, {"tokens", "ids", "offsets"} for the text
// alone (no special tokens); offsets are [begin, end) code points. Returns the exit status:
// a line that is not UTF-8 is reported on `err` with its line number and gives 1.
int tokenize_lines(const WordPieceTokenizer& tokenizer, std::istream& in, std::ostream& out, std::ostream& err);

// The subcommands that need LibTorch:
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
