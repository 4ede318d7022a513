// Shared helpers for the test suites: where fixtures and data are, temporary directories, and
// running the project's binaries as a user would.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace mpibert {
class HfTokenizer;
}

namespace mpibert::test {

// $MPIBERT_FIXTURES, else tests/fixtures in the checkout.
std::string fixtures_dir();
// The data bundled with the project (vocab, SQuAD dev sets).
std::string data_dir();
std::string vocab_path();
// The uncased WordPiece tokenizer of vocab_path() (HfTokenizer::load), loaded once.
const HfTokenizer& wordpiece_tokenizer();
std::string squad_v1_path();
std::string squad_v2_path();
// Output directories of the real HF Trainer and Lightning (tests/peer_runs, with their README).
std::string peer_runs_dir();
std::string bin_dir();
std::string mpiexec();

// A fresh directory under /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const { return entries_of(path_); }
  static std::vector<std::string> entries_of(const std::string& dir);

 private:
  std::string path_;
};

struct CommandResult {
  int exit_status;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line; output is captured.
CommandResult run_command(const std::string& command_line);

void write_text(const std::string& path, const std::string& text);
// The message of the InputError `action` throws, "<no error>" when it throws none.
std::string error_of(const std::function<void()>& action);
// Writes a vocab of vocab_path()'s size whose tokens mean other words (two letters of "the"
// swapped) to `path`, and returns `path`.
std::string write_other_vocab(const std::string& path);

// Shards (one shard + manifest, no MPI) of questions [first, first + count) of a SQuAD file,
// renumbered from 0, with default feature parameters and the tokenizer of `tokenizer`
// (HfTokenizer::load; empty: the bundled vocab.txt's), recorded as mpibert-prep records it.
void prepare_shards(const std::string& dir, const std::string& input, int64_t first, int64_t count,
                    const std::string& split = "eval", const std::string& tokenizer = "");
std::vector<std::string> read_lines(const std::string& path);  // plain or gzip
// The first line of `encodings` (JSON lines {"text", "ids", "tokens", "offsets"} that HF's
// tokenizer(text, add_special_tokens=False) gave) whose encoding by `tokenizer` differs, described;
// "" when every line agrees. `texts` counts the lines that agree.
std::string first_encoding_difference(const HfTokenizer& tokenizer, const std::string& encodings, size_t& texts);

// BERT QA parameters whose gradient is zero in exact arithmetic: the softmax over positions ignores
// a shift shared by every position (qa_outputs.bias, and the last layer's output LayerNorm bias,
// which reaches the logits only through qa_outputs) and the attention softmax ignores the key bias.
// Their computed gradients are rounding noise, which AdamW turns into steps of +-lr whose sign
// depends on summation order: comparisons of runs that sum in another order leave them out.
bool has_zero_true_gradient(const std::string& parameter_name, int64_t num_hidden_layers);

}  // namespace mpibert::test
