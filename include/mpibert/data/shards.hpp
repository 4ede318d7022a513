// HDF5 feature shards. One file per preparing rank, plus manifest.json written by rank 0 once
// every rank succeeded. Reading never depends on how many ranks prepared the data: a FeatureStore
// concatenates shards in order and addresses features by global index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpibert/data/features.hpp"

namespace mpibert {

// 2: the tokenizer's digest (tokenizer_sha256) where 1 had vocab.txt's hash; input ids stored as
// uint32 where a vocabulary has more than 65,536 tokens.
inline constexpr int32_t kShardFormatVersion = 2;

// Stored as attributes on the root group of every shard, and in the manifest.
struct ShardHeader {
  int32_t format_version = kShardFormatVersion;
  std::string split;  // "train" or "eval"
  FeatureParams params;
  std::string input_sha256, tokenizer_sha256, tool_version;
  int32_t shard_index = 0, num_shards = 1;
  int64_t first_example = 0, num_examples = 0;  // the global example range held by this shard
  int64_t num_features = 0;
};

// Examples held by a shard, for evaluation post-processing (ids, contexts, gold answers).
struct ExampleRecords {
  std::vector<std::string> ids, questions;
  std::vector<int32_t> context_indices;   // into `contexts`, local to the shard
  std::vector<std::string> answers_json;  // [{"text": ..., "answer_start": ...}, ...]
  std::vector<uint8_t> is_impossible;
  std::vector<std::string> contexts;
  size_t size() const { return ids.size(); }
};

struct Shard {
  ShardHeader header;
  FeatureTable features;
  ExampleRecords examples;
};

// Writes `shard` to exactly `path` (callers pick a temporary name and rename). Datasets are
// chunked, shuffled + deflated and carry Fletcher-32 checksums. Throws InputError naming `path`.
void write_shard(const std::string& path, const Shard& shard);
Shard read_shard(const std::string& path);
ShardHeader read_shard_header(const std::string& path);

// "1.10.8": the HDF5 library this build uses (for run records).
std::string hdf5_library_version();

// shard-00001-of-00004.h5
std::string shard_file_name(int32_t shard_index, int32_t num_shards);

struct ShardEntry {
  std::string file;
  int64_t first_example = 0, num_examples = 0, num_features = 0;
};

struct Manifest {
  std::string tool_version;
  std::string split;
  FeatureParams params;
  std::string input_path, input_sha256;
  // The tokenizer the features were made with (HfTokenizer): where it was read from, its digest
  // and kind, its vocabulary size and padding id, the type id of the context's tokens.
  std::string tokenizer_path, tokenizer_sha256, tokenizer_kind;
  int64_t vocab_size = 0;
  int32_t pad_id = 0, context_type_id = 1;
  int64_t num_examples = 0, num_features = 0;
  std::vector<ShardEntry> shards;
};

inline constexpr const char* kManifestName = "manifest.json";
std::string manifest_to_json(const Manifest& manifest);
Manifest read_manifest(const std::string& dir);  // throws InputError naming the file
// Throws InputError naming `path` where the shard's header disagrees with the manifest or with
// the manifest's entry for it.
void check_matches_manifest(const std::string& path, const ShardHeader& header, const Manifest& manifest,
                            const ShardEntry& entry);

// One feature, viewed in place.
struct FeatureView {
  const uint32_t* input_ids;
  const int32_t* offsets;  // 2 per token
  int32_t length, context_start;
  int64_t example_index;
  int32_t window_index, start_position, end_position;
};

struct ExampleView {
  const std::string* id;
  const std::string* question;
  const std::string* context;
  const std::string* answers_json;
  bool is_impossible;
};

// All shards of a prepared directory, in memory, addressed by global feature / example index.
class FeatureStore {
 public:
  static FeatureStore open(const std::string& dir);
  // One shard held in memory, e.g. features made on the fly for a single question.
  static FeatureStore from_shard(Shard shard);

  const Manifest& manifest() const { return manifest_; }
  int64_t num_features() const { return static_cast<int64_t>(feature_starts_.size()); }
  int64_t num_examples() const { return manifest_.num_examples; }
  FeatureView feature(int64_t index) const;
  ExampleView example(int64_t index) const;

 private:
  Manifest manifest_;
  std::vector<Shard> shards_;
  // Per global feature: shard and the offset of its first token inside that shard.
  std::vector<int32_t> feature_shard_;
  std::vector<int64_t> feature_starts_;
  std::vector<int64_t> shard_first_feature_;  // per shard: global index of its first feature

  void add_shard(Shard shard);
};

}  // namespace mpibert
