// The shard schema: which header fields and arrays a shard holds, the relations between them that
// readers rely on, and writing / reading a shard through the HDF5 wrapper (hdf5_file.hpp).
#include "mpibert/data/shards.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <type_traits>

#include "hdf5_file.hpp"
#include "mpibert/core/io.hpp"

namespace mpibert {
namespace {

using hdf5::dataset_record;
using hdf5::read_attribute;
using hdf5::read_dataset;
using hdf5::read_strings;
using hdf5::ShardFile;
using hdf5::write_attribute;
using hdf5::write_dataset;
using hdf5::write_strings;

// Visits every header field with its attribute name (Header is ShardHeader, const or not).
template <class Header, class Visit>
void for_each_header_field(Header& header, Visit&& visit) {
  visit("format_version", header.format_version);
  visit("split", header.split);
  visit("max_seq_length", header.params.max_seq_length);
  visit("doc_stride", header.params.doc_stride);
  visit("max_query_length", header.params.max_query_length);
  visit("input_sha256", header.input_sha256);
  visit("tokenizer_sha256", header.tokenizer_sha256);
  visit("tool_version", header.tool_version);
  visit("shard_index", header.shard_index);
  visit("num_shards", header.num_shards);
  visit("first_example", header.first_example);
  visit("num_examples", header.num_examples);
  visit("num_features", header.num_features);
}

enum class Extent { tokens, features, examples, contexts };

// Visits every stored array: dataset path, values, what it is indexed by and values per row.
// A std::vector<std::string> is stored as a string table (<path>.bytes + <path>.offsets).
template <class ShardT, class Visit>
void for_each_array(ShardT& shard, Visit&& visit) {
  auto& f = shard.features;
  auto& e = shard.examples;
  visit("/features/input_ids", f.input_ids, Extent::tokens, 1);
  visit("/features/offsets", f.offsets, Extent::tokens, 2);
  visit("/features/lengths", f.lengths, Extent::features, 1);
  visit("/features/context_starts", f.context_starts, Extent::features, 1);
  visit("/features/example_indices", f.example_indices, Extent::features, 1);
  visit("/features/window_indices", f.window_indices, Extent::features, 1);
  visit("/features/start_positions", f.start_positions, Extent::features, 1);
  visit("/features/end_positions", f.end_positions, Extent::features, 1);
  visit("/examples/is_impossible", e.is_impossible, Extent::examples, 1);
  visit("/examples/context_indices", e.context_indices, Extent::examples, 1);
  visit("/examples/ids", e.ids, Extent::examples, 1);
  visit("/examples/questions", e.questions, Extent::examples, 1);
  visit("/examples/answers_json", e.answers_json, Extent::examples, 1);
  visit("/contexts/contexts", e.contexts, Extent::contexts, 1);
}

// Every relation readers rely on: array sizes agree with the header and with each other, and
// indices stored in the arrays point inside them.
void check_consistent(const ShardFile& file, const Shard& shard) {
  const ShardHeader& header = shard.header;
  const FeatureTable& f = shard.features;
  if (header.num_features < 0 || header.num_examples < 0 || header.first_example < 0)
    file.fail("attributes", "counts and first_example must not be negative");
  const int64_t counts[] = {static_cast<int64_t>(f.num_tokens()), header.num_features, header.num_examples,
                            static_cast<int64_t>(shard.examples.contexts.size())};
  const char* count_names[] = {"tokens", "features (num_features)", "examples (num_examples)", "contexts"};
  for_each_array(shard, [&](const std::string& name, const auto& values, Extent extent, int64_t columns) {
    const int64_t expected = counts[static_cast<int>(extent)] * columns;
    if (static_cast<int64_t>(values.size()) != expected)
      file.fail(dataset_record(name), "has " + std::to_string(values.size()) + " values, expected " +
                                          (columns > 1 ? std::to_string(columns) + " x " : "") +
                                          std::to_string(counts[static_cast<int>(extent)]) + " " +
                                          count_names[static_cast<int>(extent)]);
  });
  const int64_t total_length = std::accumulate(f.lengths.begin(), f.lengths.end(), int64_t{0});
  if (total_length != counts[0])
    file.fail(dataset_record("/features/lengths"),
              "sums to " + std::to_string(total_length) + " tokens, but " + "input_ids has " + std::to_string(counts[0]));
  for (size_t i = 0; i < f.num_features(); ++i) {
    const std::string where = " (feature " + std::to_string(i) + ")";
    auto past_end = [&](uint16_t position) { return position != 0 && position >= f.lengths[i]; };
    if (f.context_starts[i] > f.lengths[i])
      file.fail(dataset_record("/features/context_starts"), "points past the feature's end" + where);
    if (past_end(f.start_positions[i]) || past_end(f.end_positions[i]))
      file.fail(dataset_record("/features/start_positions"), "answer points past the feature's end" + where);
    if (f.example_indices[i] < header.first_example || f.example_indices[i] >= header.first_example + header.num_examples)
      file.fail(dataset_record("/features/example_indices"),
                "example " + std::to_string(f.example_indices[i]) + " is outside the shard's examples" + where);
  }
  for (int32_t context : shard.examples.context_indices)
    if (context < 0 || static_cast<size_t>(context) >= shard.examples.contexts.size())
      file.fail(dataset_record("/examples/context_indices"), "context " + std::to_string(context) + " does not exist");
}

ShardHeader read_header(const ShardFile& file) {
  ShardHeader header;
  for_each_header_field(header, [&](const char* name, auto& field) {
    field = read_attribute<std::decay_t<decltype(field)>>(file, name);
  });
  if (header.format_version != kShardFormatVersion)
    file.fail("attribute format_version", "unsupported version " + std::to_string(header.format_version) + " (this build reads " +
                                              std::to_string(kShardFormatVersion) + ")");
  return header;
}

// Token ids as uint16 where every one fits (the shards of vocabularies up to 65,536 tokens, as
// before larger ones were read), else uint32.
void write_ids(const ShardFile& file, const std::string& name, const std::vector<uint32_t>& ids) {
  if (std::all_of(ids.begin(), ids.end(), [](uint32_t id) { return id <= UINT16_MAX; }))
    write_dataset(file, name, std::vector<uint16_t>(ids.begin(), ids.end()), 1);
  else
    write_dataset(file, name, ids, 1);
}

}  // namespace

void write_shard(const std::string& path, const Shard& shard) {
  ShardFile file(path);
  check_consistent(file, shard);
  file.create_in_memory();
  for_each_header_field(shard.header, [&](const char* name, const auto& field) { write_attribute(file, name, field); });
  for_each_array(shard, [&](const std::string& name, const auto& values, Extent, hsize_t columns) {
    using Values = std::decay_t<decltype(values)>;
    if constexpr (std::is_same_v<Values, std::vector<std::string>>)
      write_strings(file, name, values);
    else if constexpr (std::is_same_v<Values, std::vector<uint32_t>>)
      write_ids(file, name, values);
    else
      write_dataset(file, name, values, columns);
  });
  write_file_atomic(path, file.image_and_close());  // never leaves a partial file at `path`
}

ShardHeader read_shard_header(const std::string& path) {
  ShardFile file(path);
  file.open();
  return read_header(file);
}

Shard read_shard(const std::string& path) {
  ShardFile file(path);
  file.open();
  Shard shard;
  shard.header = read_header(file);
  for_each_array(shard, [&](const std::string& name, auto& values, Extent, hsize_t columns) {
    using Values = std::decay_t<decltype(values)>;
    if constexpr (std::is_same_v<Values, std::vector<std::string>>)
      values = read_strings(file, name);
    else
      values = read_dataset<typename Values::value_type>(file, name, columns);
  });
  check_consistent(file, shard);
  return shard;
}

std::string hdf5_library_version() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string shard_file_name(int32_t shard_index, int32_t num_shards) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.h5", shard_index, num_shards);
  return name;
}

}  // namespace mpibert
