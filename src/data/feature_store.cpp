// FeatureStore: the shards of a prepared directory (or one in-memory shard), addressed by global
// feature / example index.
#include "mpibert/data/shards.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpibert {

FeatureStore FeatureStore::open(const std::string& dir) {
  FeatureStore store;
  store.manifest_ = read_manifest(dir);
  const std::vector<ShardEntry>& entries = store.manifest_.shards;
  store.shards_.reserve(entries.size());
  for (size_t k = 0; k < entries.size(); ++k) {
    const std::string path = dir + "/" + entries[k].file;
    Shard shard = read_shard(path);
    check_matches_manifest(path, shard.header, store.manifest_, entries[k]);
    store.add_shard(std::move(shard));
  }
  return store;
}

FeatureStore FeatureStore::from_shard(Shard shard) {
  FeatureStore store;
  store.manifest_.split = shard.header.split;
  store.manifest_.params = shard.header.params;
  store.manifest_.num_examples = shard.header.num_examples;
  store.manifest_.num_features = static_cast<int64_t>(shard.features.num_features());
  store.manifest_.shards.push_back({"<memory>", 0, shard.header.num_examples, store.manifest_.num_features});
  store.add_shard(std::move(shard));
  return store;
}

void FeatureStore::add_shard(Shard shard) {
  const auto shard_index = static_cast<int32_t>(shards_.size());
  shard_first_feature_.push_back(num_features());
  int64_t token_start = 0;
  for (uint16_t length : shard.features.lengths) {
    feature_shard_.push_back(shard_index);
    feature_starts_.push_back(token_start);
    token_start += length;
  }
  shards_.push_back(std::move(shard));
}

FeatureView FeatureStore::feature(int64_t index) const {
  if (index < 0 || index >= num_features())
    throw std::out_of_range("feature " + std::to_string(index) + " out of range [0, " + std::to_string(num_features()) + ")");
  const int32_t shard = feature_shard_[index];
  const FeatureTable& table = shards_[shard].features;
  const size_t local = static_cast<size_t>(index - shard_first_feature_[shard]);
  const int64_t token_start = feature_starts_[index];
  return {table.input_ids.data() + token_start,
          table.offsets.data() + 2 * token_start,
          table.lengths[local],
          table.context_starts[local],
          table.example_indices[local],
          table.window_indices[local],
          table.start_positions[local],
          table.end_positions[local]};
}

ExampleView FeatureStore::example(int64_t index) const {
  if (index < 0 || index >= num_examples())
    throw std::out_of_range("example " + std::to_string(index) + " out of range [0, " + std::to_string(num_examples()) + ")");
  // The last shard starting at or before `index`; empty shards before it share its first_example.
  const std::vector<ShardEntry>& entries = manifest_.shards;
  const auto holder = std::upper_bound(entries.begin(), entries.end(), index,
                                       [](int64_t i, const ShardEntry& entry) { return i < entry.first_example; }) -
                      1;
  const ExampleRecords& records = shards_[holder - entries.begin()].examples;
  const size_t local = static_cast<size_t>(index - holder->first_example);
  return {&records.ids[local], &records.questions[local], &records.contexts[records.context_indices[local]],
          &records.answers_json[local], records.is_impossible[local] != 0};
}

}  // namespace mpibert
