// Shard files, manifest.json and FeatureStore: round trips, and every damaged or inconsistent input
// surfacing as an InputError that names the file and the dataset or field.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/shards.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

using test::TempDir;

template <class Body>
std::string input_error_message(Body&& body) {
  try {
    body();
  } catch (const InputError& error) {
    return error.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return "";
}

ShardHeader make_header(int64_t first_example, int64_t num_examples, int64_t num_features) {
  ShardHeader header;
  header.split = "eval";
  header.params = {384, 128, 64};
  header.input_sha256 = std::string(64, 'a');
  header.tokenizer_sha256 = std::string(64, 'b');
  header.tool_version = "0.1.0-test";
  header.first_example = first_example;
  header.num_examples = num_examples;
  header.num_features = num_features;
  return header;
}

// `num_examples` examples starting at global index `first_example`, each with 1..3 windows of
// varied lengths; two examples share each context; strings are not all ASCII.
Shard make_shard(int64_t first_example, int64_t num_examples) {
  Shard shard;
  FeatureTable& f = shard.features;
  ExampleRecords& e = shard.examples;
  for (int64_t local = 0; local < num_examples; ++local) {
    const int64_t global = first_example + local;
    const int windows = 1 + static_cast<int>(global % 3);
    for (int w = 0; w < windows; ++w) {
      const uint16_t length = static_cast<uint16_t>(6 + (global * 5 + w * 7) % 13);
      for (uint16_t t = 0; t < length; ++t) {
        f.input_ids.push_back(static_cast<uint16_t>(1000 + global * 37 + w * 11 + t));
        f.offsets.push_back(t < 3 ? -1 : t * 2);
        f.offsets.push_back(t < 3 ? -1 : t * 2 + 2);
      }
      f.lengths.push_back(length);
      f.context_starts.push_back(3);
      f.example_indices.push_back(global);
      f.window_indices.push_back(static_cast<uint16_t>(w));
      f.start_positions.push_back(w == 0 ? 4 : 0);
      f.end_positions.push_back(w == 0 ? 5 : 0);
    }
    if (local % 2 == 0) e.contexts.push_back("Die Brücke über den Fluß Nr. " + std::to_string(global) + " — 東京 🚀");
    e.ids.push_back("q" + std::to_string(global));
    e.questions.push_back("Wie heißt die Brücke " + std::to_string(global) + "? ¿Qué?");
    e.context_indices.push_back(static_cast<int32_t>(e.contexts.size() - 1));
    const bool impossible = global % 4 == 3;
    e.is_impossible.push_back(impossible);
    e.answers_json.push_back(impossible ? "[]" : R"([{"text": "Brücke", "answer_start": 4}])");
  }
  shard.header = make_header(first_example, num_examples, static_cast<int64_t>(f.num_features()));
  return shard;
}

// One example with many full windows of random tokens: the file is mostly incompressible chunk data.
Shard make_large_shard() {
  Shard shard = make_shard(0, 1);
  FeatureTable& f = shard.features;
  std::mt19937 random(42);
  for (int i = 0; i < 2000; ++i) {
    for (int t = 0; t < 384; ++t) {
      f.input_ids.push_back(static_cast<uint16_t>(random()));
      f.offsets.push_back(static_cast<int32_t>(random() >> 1));
      f.offsets.push_back(static_cast<int32_t>(random() >> 1));
    }
    f.lengths.push_back(384);
    f.context_starts.push_back(20);
    f.example_indices.push_back(0);
    f.window_indices.push_back(static_cast<uint16_t>(i + 1));
    f.start_positions.push_back(0);
    f.end_positions.push_back(0);
  }
  shard.header.num_features = static_cast<int64_t>(f.num_features());
  return shard;
}

void expect_same_header(const ShardHeader& a, const ShardHeader& b) {
  EXPECT_EQ(a.format_version, b.format_version);
  EXPECT_EQ(a.split, b.split);
  EXPECT_EQ(a.params.max_seq_length, b.params.max_seq_length);
  EXPECT_EQ(a.params.doc_stride, b.params.doc_stride);
  EXPECT_EQ(a.params.max_query_length, b.params.max_query_length);
  EXPECT_EQ(a.input_sha256, b.input_sha256);
  EXPECT_EQ(a.tokenizer_sha256, b.tokenizer_sha256);
  EXPECT_EQ(a.tool_version, b.tool_version);
  EXPECT_EQ(a.shard_index, b.shard_index);
  EXPECT_EQ(a.num_shards, b.num_shards);
  EXPECT_EQ(a.first_example, b.first_example);
  EXPECT_EQ(a.num_examples, b.num_examples);
  EXPECT_EQ(a.num_features, b.num_features);
}

void expect_same_shard(const Shard& a, const Shard& b) {
  expect_same_header(a.header, b.header);
  EXPECT_EQ(a.features.input_ids, b.features.input_ids);
  EXPECT_EQ(a.features.offsets, b.features.offsets);
  EXPECT_EQ(a.features.lengths, b.features.lengths);
  EXPECT_EQ(a.features.context_starts, b.features.context_starts);
  EXPECT_EQ(a.features.example_indices, b.features.example_indices);
  EXPECT_EQ(a.features.window_indices, b.features.window_indices);
  EXPECT_EQ(a.features.start_positions, b.features.start_positions);
  EXPECT_EQ(a.features.end_positions, b.features.end_positions);
  EXPECT_EQ(a.examples.ids, b.examples.ids);
  EXPECT_EQ(a.examples.questions, b.examples.questions);
  EXPECT_EQ(a.examples.context_indices, b.examples.context_indices);
  EXPECT_EQ(a.examples.answers_json, b.examples.answers_json);
  EXPECT_EQ(a.examples.is_impossible, b.examples.is_impossible);
  EXPECT_EQ(a.examples.contexts, b.examples.contexts);
}

Manifest make_manifest(const std::vector<Shard>& shards) {
  Manifest manifest;
  const ShardHeader& header = shards.front().header;
  manifest.tool_version = header.tool_version;
  manifest.split = header.split;
  manifest.params = header.params;
  manifest.input_path = "/data/dev-v2.0.json";
  manifest.input_sha256 = header.input_sha256;
  manifest.tokenizer_path = "/data/vocab.txt";
  manifest.tokenizer_kind = "WordPiece (/data/vocab.txt)";
  manifest.tokenizer_sha256 = header.tokenizer_sha256;
  manifest.vocab_size = 30522;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardHeader& h = shards[i].header;
    manifest.shards.push_back({shard_file_name(static_cast<int32_t>(i), static_cast<int32_t>(shards.size())), h.first_example,
                               h.num_examples, h.num_features});
    manifest.num_examples += h.num_examples;
    manifest.num_features += h.num_features;
  }
  return manifest;
}

// Writes shards + manifest.json the way preparation does; returns the shards as written.
std::vector<Shard> write_prepared_dir(const std::string& dir, std::vector<Shard> shards) {
  for (size_t i = 0; i < shards.size(); ++i) {
    shards[i].header.shard_index = static_cast<int32_t>(i);
    shards[i].header.num_shards = static_cast<int32_t>(shards.size());
    write_shard(dir + "/" + shard_file_name(static_cast<int32_t>(i), static_cast<int32_t>(shards.size())), shards[i]);
  }
  write_file_atomic(dir + "/" + kManifestName, manifest_to_json(make_manifest(shards)));
  return shards;
}

TEST(ShardFileName, HasFiveDigitIndexAndCount) {
  EXPECT_EQ(shard_file_name(0, 4), "shard-00000-of-00004.h5");
  EXPECT_EQ(shard_file_name(1, 4), "shard-00001-of-00004.h5");
  EXPECT_EQ(shard_file_name(11, 128), "shard-00011-of-00128.h5");
}

TEST(ShardFile, RoundTripsEveryField) {
  TempDir dir;
  Shard shard = make_shard(10, 7);
  shard.header.shard_index = 2;
  shard.header.num_shards = 5;
  const std::string path = dir.file("shard.h5");
  write_shard(path, shard);
  expect_same_shard(read_shard(path), shard);
}

TEST(ShardFile, RoundTripsShardWithoutExamples) {
  TempDir dir;
  Shard shard = make_shard(42, 0);
  shard.header.input_sha256 = "";  // empty strings survive too
  const std::string path = dir.file("empty.h5");
  write_shard(path, shard);
  const Shard read = read_shard(path);
  expect_same_shard(read, shard);
  EXPECT_EQ(read.features.num_features(), 0u);
  EXPECT_EQ(read.examples.size(), 0u);
}

TEST(ShardFile, ReadsHeaderAlone) {
  TempDir dir;
  Shard shard = make_shard(3, 4);
  shard.header.shard_index = 1;
  shard.header.num_shards = 2;
  const std::string path = dir.file("shard.h5");
  write_shard(path, shard);
  expect_same_header(read_shard_header(path), shard.header);
}

TEST(ShardFile, RejectsInconsistentShardWithoutCreatingFile) {
  TempDir dir;
  const std::string path = dir.file("bad.h5");
  Shard shard = make_shard(0, 3);
  shard.features.offsets.pop_back();
  EXPECT_NE(input_error_message([&] { write_shard(path, shard); }).find("/features/offsets"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ShardFile, MissingFileIsInputErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.file("absent.h5");
  const std::string message = input_error_message([&] { read_shard_header(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("No such file"), std::string::npos) << message;
}

TEST(ShardFile, CorruptedChunkIsInputErrorNamingFileAndDataset) {
  TempDir dir;
  const std::string path = dir.file("shard.h5");
  write_shard(path, make_large_shard());
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 1u << 20);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    const char garbage[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    file.write(garbage, sizeof garbage);
  }
  const std::string message = input_error_message([&] { read_shard(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("dataset /features/"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

TEST(ShardFile, TruncatedFileIsInputErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.file("shard.h5");
  write_shard(path, make_large_shard());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  const std::string message = input_error_message([&] { read_shard(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
}

TEST(ShardFile, AttributeDisagreeingWithDataIsInputErrorNamingDataset) {
  TempDir dir;
  const std::string path = dir.file("shard.h5");
  write_shard(path, make_shard(0, 5));
  {  // a shard edited behind our back: one more feature claimed than stored
    const int64_t wrong = read_shard_header(path).num_features + 1;
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t attribute = H5Aopen(file, "num_features", H5P_DEFAULT);
    H5Awrite(attribute, H5T_NATIVE_INT64, &wrong);
    H5Aclose(attribute);
    H5Fclose(file);
  }
  const std::string message = input_error_message([&] { read_shard(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("dataset /features/"), std::string::npos) << message;
}

// In a child process: the limit and the ignored SIGXFSZ must not leak into the test runner.
TEST(ShardFile, WriteBeyondFileSizeLimitIsInputErrorAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("shard.h5");
  const Shard shard = make_large_shard();
  std::fflush(nullptr);  // or the child's exit would print the runner's buffered output again
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 1 << 20;
    setrlimit(RLIMIT_FSIZE, &limit);
    int code = 1;
    try {
      write_shard(path, shard);
    } catch (const InputError& error) {
      std::fprintf(stderr, "expected error: %s\n", error.what());
      code = std::string(error.what()).find(path) != std::string::npos ? 0 : 2;
    } catch (...) {
      code = 3;
    }
    std::exit(code);  // runs HDF5's exit handlers: they must not trip over the failed file
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{}) << "partial or temporary file left behind";
}

TEST(Manifest, RoundTrips) {
  TempDir dir;
  const Manifest manifest = make_manifest({make_shard(0, 3), make_shard(3, 0), make_shard(3, 4)});
  const std::string json = manifest_to_json(manifest);
  EXPECT_NE(json.find("\n  \"format\": \"mpibert-shards\""), std::string::npos) << json;
  write_file_atomic(dir.file(kManifestName), json);
  const Manifest read = read_manifest(dir.path());
  EXPECT_EQ(read.tool_version, manifest.tool_version);
  EXPECT_EQ(read.split, manifest.split);
  EXPECT_EQ(read.params.max_seq_length, manifest.params.max_seq_length);
  EXPECT_EQ(read.params.doc_stride, manifest.params.doc_stride);
  EXPECT_EQ(read.params.max_query_length, manifest.params.max_query_length);
  EXPECT_EQ(read.input_path, manifest.input_path);
  EXPECT_EQ(read.input_sha256, manifest.input_sha256);
  EXPECT_EQ(read.tokenizer_path, manifest.tokenizer_path);
  EXPECT_EQ(read.tokenizer_kind, manifest.tokenizer_kind);
  EXPECT_EQ(read.pad_id, manifest.pad_id);
  EXPECT_EQ(read.context_type_id, manifest.context_type_id);
  EXPECT_EQ(read.tokenizer_sha256, manifest.tokenizer_sha256);
  EXPECT_EQ(read.vocab_size, manifest.vocab_size);
  EXPECT_EQ(read.num_examples, manifest.num_examples);
  EXPECT_EQ(read.num_features, manifest.num_features);
  ASSERT_EQ(read.shards.size(), manifest.shards.size());
  for (size_t i = 0; i < read.shards.size(); ++i) {
    EXPECT_EQ(read.shards[i].file, manifest.shards[i].file);
    EXPECT_EQ(read.shards[i].first_example, manifest.shards[i].first_example);
    EXPECT_EQ(read.shards[i].num_examples, manifest.shards[i].num_examples);
    EXPECT_EQ(read.shards[i].num_features, manifest.shards[i].num_features);
  }
}

// Writes manifest.json with `from` replaced by `to` and returns read_manifest's error.
std::string manifest_error_after_edit(const std::string& from, const std::string& to) {
  TempDir dir;
  std::string json = manifest_to_json(make_manifest({make_shard(0, 3), make_shard(3, 4)}));
  const size_t at = json.find(from);
  if (at == std::string::npos) return "test bug: '" + from + "' not in manifest";
  json.replace(at, from.size(), to);
  write_file_atomic(dir.file(kManifestName), json);
  const std::string message = input_error_message([&] { read_manifest(dir.path()); });
  EXPECT_NE(message.find(dir.file(kManifestName)), std::string::npos) << message;
  return message;
}

TEST(Manifest, NamesMissingField) {
  const std::string message = manifest_error_after_edit("\"doc_stride\"", "\"doc_strid\"");
  EXPECT_NE(message.find("parameters.doc_stride"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

TEST(Manifest, NamesFieldOfWrongType) {
  const std::string message = manifest_error_after_edit("\"vocab_size\": 30522", "\"vocab_size\": \"30522\"");
  EXPECT_NE(message.find("tokenizer.vocab_size"), std::string::npos) << message;
}

TEST(Manifest, RejectsTotalsThatDisagreeWithShards) {
  const std::string message = manifest_error_after_edit("\"num_examples\": 7", "\"num_examples\": 8");
  EXPECT_NE(message.find("num_examples"), std::string::npos) << message;
}

TEST(Manifest, RejectsShardsThatDoNotFollowEachOther) {
  const std::string message = manifest_error_after_edit("\"first_example\": 3", "\"first_example\": 4");
  EXPECT_NE(message.find("shards[1].first_example"), std::string::npos) << message;
}

TEST(Manifest, RejectsInvalidJson) {
  const std::string message = manifest_error_after_edit("\"shards\": [", "\"shards\": [[");
  EXPECT_NE(message.find("invalid JSON"), std::string::npos) << message;
}

TEST(FeatureStore, IndexesFeaturesAndExamplesAcrossShards) {
  TempDir dir;
  const std::vector<Shard> shards = write_prepared_dir(dir.path(), {make_shard(0, 3), make_shard(3, 0), make_shard(3, 4)});
  const FeatureStore store = FeatureStore::open(dir.path());
  const int64_t first_count = static_cast<int64_t>(shards[0].features.num_features());
  ASSERT_EQ(store.num_features(), first_count + static_cast<int64_t>(shards[2].features.num_features()));
  ASSERT_EQ(store.num_examples(), 7);
  EXPECT_EQ(store.manifest().shards.size(), 3u);

  int64_t global = 0;
  for (const Shard* shard : {&shards[0], &shards[2]}) {  // the empty shard adds nothing
    const FeatureTable& table = shard->features;
    size_t token = 0;
    for (size_t local = 0; local < table.num_features(); ++local, ++global) {
      const FeatureView view = store.feature(global);
      ASSERT_EQ(view.length, table.lengths[local]);
      EXPECT_EQ(std::vector<uint16_t>(view.input_ids, view.input_ids + view.length),
                std::vector<uint16_t>(table.input_ids.begin() + token, table.input_ids.begin() + token + view.length));
      EXPECT_EQ(std::vector<int32_t>(view.offsets, view.offsets + 2 * view.length),
                std::vector<int32_t>(table.offsets.begin() + 2 * token, table.offsets.begin() + 2 * (token + view.length)));
      EXPECT_EQ(view.context_start, table.context_starts[local]);
      EXPECT_EQ(view.example_index, table.example_indices[local]);
      EXPECT_EQ(view.window_index, table.window_indices[local]);
      EXPECT_EQ(view.start_position, table.start_positions[local]);
      EXPECT_EQ(view.end_position, table.end_positions[local]);
      token += view.length;
    }
  }
  // Examples 2 and 3 sit on both sides of the boundary (with the empty shard in between).
  for (int64_t index : {0, 2, 3, 6}) {
    const Shard& shard = index < 3 ? shards[0] : shards[2];
    const size_t local = static_cast<size_t>(index - shard.header.first_example);
    const ExampleView view = store.example(index);
    EXPECT_EQ(*view.id, "q" + std::to_string(index));
    EXPECT_EQ(*view.question, shard.examples.questions[local]);
    EXPECT_EQ(*view.context, shard.examples.contexts[shard.examples.context_indices[local]]);
    EXPECT_EQ(*view.answers_json, shard.examples.answers_json[local]);
    EXPECT_EQ(view.is_impossible, shard.examples.is_impossible[local] != 0);
  }
}

TEST(FeatureStore, OutOfRangeIndicesThrow) {
  TempDir dir;
  write_prepared_dir(dir.path(), {make_shard(0, 2), make_shard(2, 2)});
  const FeatureStore store = FeatureStore::open(dir.path());
  EXPECT_THROW(store.feature(-1), std::out_of_range);
  EXPECT_THROW(store.feature(store.num_features()), std::out_of_range);
  EXPECT_NO_THROW(store.feature(store.num_features() - 1));
  EXPECT_THROW(store.example(-1), std::out_of_range);
  EXPECT_THROW(store.example(4), std::out_of_range);
  EXPECT_NO_THROW(store.example(3));
}

TEST(FeatureStore, RejectsShardDisagreeingWithManifest) {
  TempDir dir;
  std::vector<Shard> shards = write_prepared_dir(dir.path(), {make_shard(0, 2), make_shard(2, 2)});
  const std::string second = dir.file(shard_file_name(1, 2));
  shards[1].header.tokenizer_sha256 = std::string(64, 'c');  // made with another tokenizer
  write_shard(second, shards[1]);
  const std::string message = input_error_message([&] { FeatureStore::open(dir.path()); });
  EXPECT_NE(message.find(second), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer_sha256"), std::string::npos) << message;
}

TEST(FeatureStore, RejectsMissingShard) {
  TempDir dir;
  write_prepared_dir(dir.path(), {make_shard(0, 2), make_shard(2, 2)});
  const std::string second = dir.file(shard_file_name(1, 2));
  std::filesystem::remove(second);
  const std::string message = input_error_message([&] { FeatureStore::open(dir.path()); });
  EXPECT_NE(message.find(second), std::string::npos) << message;
}

}  // namespace
}  // namespace mpibert
