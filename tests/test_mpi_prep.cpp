// Run by ctest under `mpiexec -n 1|2|3`: preparation is collective, its features are identical
// to a single-process reference whatever the rank count, and a failure on one rank fails every
// rank without leaving files behind.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>

#include "mpibert/cli/prep_command.hpp"
#include "mpibert/core/logging.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "test_support.hpp"

namespace mpibert {
namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Rank 0 makes a temporary directory and tells the others its name.
class SharedTempDir {
 public:
  SharedTempDir() {
    char name[256] = {};
    if (world_rank() == 0) {
      owner_ = std::make_unique<test::TempDir>();
      std::snprintf(name, sizeof name, "%s", owner_->path().c_str());
    }
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = name;
  }
  ~SharedTempDir() { MPI_Barrier(MPI_COMM_WORLD); }
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<test::TempDir> owner_;
  std::string path_;
};

void expect_same_feature(const FeatureView& got, const FeatureTable& want, size_t f, size_t token_start) {
  ASSERT_EQ(got.length, want.lengths[f]);
  EXPECT_EQ(got.context_start, want.context_starts[f]);
  EXPECT_EQ(got.example_index, want.example_indices[f]);
  EXPECT_EQ(got.window_index, want.window_indices[f]);
  EXPECT_EQ(got.start_position, want.start_positions[f]);
  EXPECT_EQ(got.end_position, want.end_positions[f]);
  for (int32_t t = 0; t < got.length; ++t) {
    ASSERT_EQ(got.input_ids[t], want.input_ids[token_start + static_cast<size_t>(t)]) << "feature " << f;
    ASSERT_EQ(got.offsets[2 * t], want.offsets[2 * (token_start + static_cast<size_t>(t))]);
    ASSERT_EQ(got.offsets[2 * t + 1], want.offsets[2 * (token_start + static_cast<size_t>(t)) + 1]);
  }
}

TEST(MpiPrep, FeaturesMatchASingleProcessReference) {
  for (const std::string& input : {test::squad_v1_path(), test::squad_v2_path()}) {
    SharedTempDir dir;
    PrepOptions options;
    options.input = input;
    options.tokenizer = test::vocab_path();
    options.out_dir = dir.path() + "/shards";
    options.split = "eval";
    ASSERT_EQ(run_prep(options, world_rank(), world_size()), 0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() != 0) continue;

    FeatureStore store = FeatureStore::open(options.out_dir);
    EXPECT_EQ(store.manifest().shards.size(), static_cast<size_t>(world_size()));
    SquadDataset data = read_squad(input);
    FeatureTable reference =
        make_features(data, 0, static_cast<int64_t>(data.examples.size()), test::wordpiece_tokenizer(), options.params);
    ASSERT_EQ(store.num_features(), static_cast<int64_t>(reference.num_features()));
    ASSERT_EQ(store.num_examples(), static_cast<int64_t>(data.examples.size()));
    size_t token_start = 0;
    for (size_t f = 0; f < reference.num_features(); ++f) {
      expect_same_feature(store.feature(static_cast<int64_t>(f)), reference, f, token_start);
      if (HasFatalFailure()) return;
      token_start += reference.lengths[f];
    }
    for (size_t e = 0; e < data.examples.size(); ++e) {
      ExampleView example = store.example(static_cast<int64_t>(e));
      ASSERT_EQ(*example.id, data.examples[e].id);
      ASSERT_EQ(*example.context, data.contexts[static_cast<size_t>(data.examples[e].context_index)]);
      ASSERT_EQ(example.is_impossible, data.examples[e].is_impossible);
    }
  }
}

TEST(MpiPrep, FailureOnTheLastRankFailsEveryRankAndLeavesNoFiles) {
  // Two articles per rank; the last article's question is far too long, so only the last rank fails.
  std::string articles;
  for (int a = 0; a < 2 * world_size(); ++a) {
    std::string question = "who won?";
    if (a + 1 == 2 * world_size())
      for (question.clear(); question.size() < 1000;) question += "w ";
    articles += std::string(a ? "," : "") +
                R"({"title": "t", "paragraphs": [{"context": "Denver won the game.", "qas": [{"id": "q)" + std::to_string(a) +
                R"(", "question": ")" + question + R"(", "answers": [{"text": "Denver", "answer_start": 0}]}]}]})";
  }
  SharedTempDir dir;
  if (world_rank() == 0) test::write_text(dir.path() + "/input.json", R"({"version": "1.1", "data": [)" + articles + "]}");
  MPI_Barrier(MPI_COMM_WORLD);
  PrepOptions options;
  options.input = dir.path() + "/input.json";
  options.tokenizer = test::vocab_path();
  options.out_dir = dir.path() + "/shards";
  EXPECT_EQ(run_prep(options, world_rank(), world_size()), 1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    std::vector<std::string> left;
    for (const auto& entry : std::filesystem::directory_iterator(options.out_dir)) left.push_back(entry.path().string());
    EXPECT_TRUE(left.empty()) << left.size() << " files left, first: " << left.front();
  }
}

}  // namespace
}  // namespace mpibert
