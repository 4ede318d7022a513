#include "test_support.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/shard_building.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

namespace fs = std::filesystem;

namespace mpibert::test {
namespace {

// The suites run mpiexec themselves: as root (CI) Open MPI needs these, and 3 ranks on 2 cores
// need oversubscription. Values already in the environment win.
const bool mpi_environment_ready = [] {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  return true;
}();

}  // namespace

namespace {
// A folder the environment names, else the build's path: a suite run from a copy of the checkout
// elsewhere (scripts/gpu_check.sh on the GPU machine) is given its own.
std::string from_environment(const char* name, const char* built_in) {
  const char* from_env = std::getenv(name);
  return from_env && *from_env ? from_env : built_in;
}
}  // namespace

std::string fixtures_dir() { return from_environment("MPIBERT_FIXTURES", MPIBERT_DEFAULT_FIXTURES); }
std::string data_dir() { return from_environment("MPIBERT_DATA_DIR", MPIBERT_DATA_DIR); }
std::string peer_runs_dir() { return MPIBERT_PEER_RUNS_DIR; }
std::string vocab_path() { return data_dir() + "/bert-base-uncased/vocab.txt"; }
std::string squad_v1_path() { return data_dir() + "/squad/dev-v1.1.json.gz"; }
std::string squad_v2_path() { return data_dir() + "/squad/dev-v2.0.json.gz"; }
std::string bin_dir() { return from_environment("MPIBERT_BIN_DIR", MPIBERT_BIN_DIR); }
std::string mpiexec() { return MPIBERT_MPIEXEC; }

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "mpibert-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

std::vector<std::string> TempDir::entries_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

CommandResult run_command(const std::string& command_line) {
  FILE* pipe = ::popen((command_line + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command_line);
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

void prepare_shards(const std::string& dir, const std::string& input, int64_t first, int64_t count, const std::string& split,
                    const std::string& tokenizer_path) {
  const SquadDataset all = read_squad(input);
  SquadDataset data;
  data.path = input;
  for (int64_t e = first; e < first + count; ++e) {
    Example example = all.examples[static_cast<size_t>(e)];
    if (data.contexts.empty() || data.contexts.back() != all.contexts[static_cast<size_t>(example.context_index)])
      data.contexts.push_back(all.contexts[static_cast<size_t>(example.context_index)]);
    example.context_index = static_cast<int32_t>(data.contexts.size() - 1);
    data.examples.push_back(std::move(example));
  }
  std::unique_ptr<HfTokenizer> own;
  if (!tokenizer_path.empty()) own = std::make_unique<HfTokenizer>(HfTokenizer::load(tokenizer_path));
  const HfTokenizer& tokenizer = own ? *own : wordpiece_tokenizer();
  ShardHeader header;
  header.split = split;
  header.tokenizer_sha256 = tokenizer.digest();  // as mpibert-prep records it
  Shard shard = build_shard(data, 0, count, tokenizer, header);
  fs::create_directories(dir);
  write_shard(dir + "/" + shard_file_name(0, 1), shard);
  Manifest manifest;
  manifest.split = split;
  manifest.input_path = input;  // as mpibert-prep records it
  manifest.num_examples = count;
  manifest.num_features = shard.header.num_features;
  manifest.tokenizer_path = tokenizer_path.empty() ? vocab_path() : tokenizer_path;
  manifest.tokenizer_sha256 = tokenizer.digest();
  manifest.tokenizer_kind = tokenizer.description();
  manifest.vocab_size = static_cast<int64_t>(tokenizer.vocab_size());
  manifest.pad_id = tokenizer.pad_id();
  manifest.context_type_id = context_type_id(tokenizer);
  manifest.shards.push_back({shard_file_name(0, 1), 0, count, shard.header.num_features});
  write_file_atomic(dir + "/" + kManifestName, manifest_to_json(manifest));
}

const HfTokenizer& wordpiece_tokenizer() {
  static const HfTokenizer tokenizer = HfTokenizer::load(vocab_path());
  return tokenizer;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string write_other_vocab(const std::string& path) {
  std::string vocab = read_file(vocab_path());
  const size_t the = vocab.find("the");
  std::swap(vocab[the], vocab[the + 1]);
  write_text(path, vocab);
  return path;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

bool has_zero_true_gradient(const std::string& name, int64_t num_hidden_layers) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const std::string last_layer = "layer." + std::to_string(num_hidden_layers - 1) + ".";
  return ends_with("qa_outputs.bias") || name == "classifier.bias" || ends_with("attention.self.key.bias") ||
         ends_with(last_layer + "output.LayerNorm.bias") || ends_with("attention.k_lin.bias") ||
         ends_with(last_layer + "output_layer_norm.bias");  // DistilBERT's names
}

std::string first_encoding_difference(const HfTokenizer& tokenizer, const std::string& encodings, size_t& texts) {
  texts = 0;
  for (const std::string& line : read_lines(encodings)) {
    const nlohmann::json expected = nlohmann::json::parse(line);
    const std::string text = expected["text"].get<std::string>();
    const TokenizedText got = tokenizer.encode(text);
    std::vector<std::array<int32_t, 2>> offsets;
    for (const Span& span : got.offsets) offsets.push_back({span.begin, span.end});
    const bool same = expected["ids"] == nlohmann::json(got.ids) && expected["tokens"] == nlohmann::json(got.tokens) &&
                      expected["offsets"] == nlohmann::json(offsets);
    if (!same)
      return "text " + std::to_string(texts) + " " + nlohmann::json(text).dump().substr(0, 200) +
             "\n  HF:   " + expected["tokens"].dump().substr(0, 400) + " " + expected["offsets"].dump().substr(0, 400) +
             "\n  ours: " + nlohmann::json(got.tokens).dump().substr(0, 400) + " " +
             nlohmann::json(offsets).dump().substr(0, 400);
    ++texts;
  }
  return "";
}

}  // namespace mpibert::test
