// manifest.json: the shards of a prepared directory, in order, with what they were prepared from;
// and the check that a shard agrees with its manifest entry.
#include "mpibert/data/shards.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "mpibert/core/error.hpp"
#include "mpibert/core/json_fields.hpp"

namespace mpibert {
namespace {

using Json = nlohmann::ordered_json;

}  // namespace

void check_matches_manifest(const std::string& path, const ShardHeader& header, const Manifest& manifest,
                            const ShardEntry& entry) {
  auto expect_same = [&](const char* attribute, const Json& in_shard, const Json& in_manifest) {
    if (in_shard != in_manifest)
      throw InputError(describe(path, std::string("attribute ") + attribute,
                                "is " + in_shard.dump() + ", but " + kManifestName + " says " + in_manifest.dump()));
  };
  expect_same("split", header.split, manifest.split);
  expect_same("tool_version", header.tool_version, manifest.tool_version);
  expect_same("max_seq_length", header.params.max_seq_length, manifest.params.max_seq_length);
  expect_same("doc_stride", header.params.doc_stride, manifest.params.doc_stride);
  expect_same("max_query_length", header.params.max_query_length, manifest.params.max_query_length);
  expect_same("input_sha256", header.input_sha256, manifest.input_sha256);
  expect_same("tokenizer_sha256", header.tokenizer_sha256, manifest.tokenizer_sha256);
  expect_same("first_example", header.first_example, entry.first_example);
  expect_same("num_examples", header.num_examples, entry.num_examples);
  expect_same("num_features", header.num_features, entry.num_features);
}

std::string manifest_to_json(const Manifest& manifest) {
  Json shards = Json::array();
  for (const ShardEntry& entry : manifest.shards)
    shards.push_back({{"file", entry.file},
                      {"first_example", entry.first_example},
                      {"num_examples", entry.num_examples},
                      {"num_features", entry.num_features}});
  const Json json = {
      {"format", "mpibert-shards"},
      {"format_version", kShardFormatVersion},
      {"tool_version", manifest.tool_version},
      {"split", manifest.split},
      {"parameters",
       {{"max_seq_length", manifest.params.max_seq_length},
        {"doc_stride", manifest.params.doc_stride},
        {"max_query_length", manifest.params.max_query_length}}},
      {"input", {{"path", manifest.input_path}, {"sha256", manifest.input_sha256}}},
      {"tokenizer",
       {{"path", manifest.tokenizer_path},
        {"sha256", manifest.tokenizer_sha256},
        {"kind", manifest.tokenizer_kind},
        {"vocab_size", manifest.vocab_size},
        {"pad_id", manifest.pad_id},
        {"context_type_id", manifest.context_type_id}}},
      {"num_examples", manifest.num_examples},
      {"num_features", manifest.num_features},
      {"shards", shards},
  };
  return json.dump(2) + "\n";
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  const JsonFields fields(path);
  const Json root = fields.parse_object();
  if (fields.text(root, "", "format") != "mpibert-shards") fields.fail("format", "must be \"mpibert-shards\"");
  const int32_t version = fields.integer<int32_t>(root, "", "format_version");
  if (version != kShardFormatVersion)
    fields.fail("format_version", "unsupported version " + std::to_string(version) + " (this build reads " +
                                      std::to_string(kShardFormatVersion) + ")");
  Manifest manifest;
  manifest.tool_version = fields.text(root, "", "tool_version");
  manifest.split = fields.text(root, "", "split");
  const Json& parameters = fields.get(root, "", "parameters", Json::value_t::object);
  manifest.params.max_seq_length = fields.integer<int32_t>(parameters, "parameters", "max_seq_length");
  manifest.params.doc_stride = fields.integer<int32_t>(parameters, "parameters", "doc_stride");
  manifest.params.max_query_length = fields.integer<int32_t>(parameters, "parameters", "max_query_length");
  const Json& input = fields.get(root, "", "input", Json::value_t::object);
  manifest.input_path = fields.text(input, "input", "path");
  manifest.input_sha256 = fields.text(input, "input", "sha256");
  const Json& tokenizer = fields.get(root, "", "tokenizer", Json::value_t::object);
  manifest.tokenizer_path = fields.text(tokenizer, "tokenizer", "path");
  manifest.tokenizer_sha256 = fields.text(tokenizer, "tokenizer", "sha256");
  manifest.tokenizer_kind = fields.text(tokenizer, "tokenizer", "kind");
  manifest.vocab_size = fields.integer<int64_t>(tokenizer, "tokenizer", "vocab_size");
  manifest.pad_id = fields.integer<int32_t>(tokenizer, "tokenizer", "pad_id");
  manifest.context_type_id = fields.integer<int32_t>(tokenizer, "tokenizer", "context_type_id");
  if (manifest.vocab_size < 1) fields.fail("tokenizer.vocab_size", "must be positive");
  if (manifest.pad_id < 0 || manifest.pad_id >= manifest.vocab_size)
    fields.fail("tokenizer.pad_id", "must be an id of the vocabulary");
  if (manifest.context_type_id < 0 || manifest.context_type_id > 1) fields.fail("tokenizer.context_type_id", "must be 0 or 1");
  manifest.num_examples = fields.integer<int64_t>(root, "", "num_examples");
  manifest.num_features = fields.integer<int64_t>(root, "", "num_features");
  const Json& shards = fields.get(root, "", "shards", Json::value_t::array);
  int64_t next_example = 0, total_features = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = "shards[" + std::to_string(i) + "]";
    if (!shards[i].is_object()) fields.fail(name, "must be an object");
    ShardEntry entry;
    entry.file = fields.text(shards[i], name, "file");
    entry.first_example = fields.integer<int64_t>(shards[i], name, "first_example");
    entry.num_examples = fields.integer<int64_t>(shards[i], name, "num_examples");
    entry.num_features = fields.integer<int64_t>(shards[i], name, "num_features");
    if (entry.file.empty() || entry.file.find('/') != std::string::npos || entry.file == "." || entry.file == "..")
      fields.fail(name + ".file", "must be a file name inside the directory");
    if (entry.first_example != next_example)
      fields.fail(name + ".first_example", "is " + std::to_string(entry.first_example) + ", expected " +
                                               std::to_string(next_example) + " (shards must cover examples in order)");
    next_example += entry.num_examples;
    total_features += entry.num_features;
    manifest.shards.push_back(std::move(entry));
  }
  if (next_example != manifest.num_examples)
    fields.fail("num_examples",
                "is " + std::to_string(manifest.num_examples) + ", but the shards hold " + std::to_string(next_example));
  if (total_features != manifest.num_features)
    fields.fail("num_features",
                "is " + std::to_string(manifest.num_features) + ", but the shards hold " + std::to_string(total_features));
  return manifest;
}

}  // namespace mpibert
