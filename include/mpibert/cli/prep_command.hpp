// mpibert-prep: SQuAD JSON -> HDF5 feature shards, one per MPI rank, plus a manifest.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/features.hpp"
#include "mpibert/shards.hpp"
#include "mpibert/squad.hpp"

namespace mpibert {

struct PrepOptions {
  std::string input, vocab, out_dir;
  std::string split = "train";  // "train" or "eval": recorded, and checked by the trainer
  FeatureParams params;
  bool overwrite = false;       // replace shards made with other parameters
};

// The shard of examples [first, first + count) of `data`: features made with header.params,
// example records, and `header` completed with the example range and the feature count.
Shard build_shard(const SquadDataset& data, int64_t first_example, int64_t num_examples, const WordPieceTokenizer& tokenizer,
                  ShardHeader header);

// Contiguous article ranges [first, first + count) per part, balanced by ArticleRange::cost.
// Contiguity keeps the global example order equal to file order whatever the number of parts.
std::vector<std::pair<int64_t, int64_t>> partition_articles(const std::vector<ArticleRange>& articles, int parts);

// Runs collectively on every rank of MPI_COMM_WORLD; returns the process exit status, the same on
// every rank. Shards are written under temporary names and renamed only once every rank has
// succeeded; rank 0 writes the manifest last. On failure no file is left under a final name.
int run_prep(const PrepOptions& options, int rank, int world_size);

// Writes the articles [begin, end) of a SQuAD file (validated first) as a new SQuAD JSON file:
// how a dev set is split by article into train and eval parts. Negative bounds count from the end.
void write_article_subset(const std::string& input, int64_t begin, int64_t end, const std::string& output);

// Statistics of a prepared directory, as printed by `mpibert-prep inspect DIR`.
nlohmann::ordered_json inspect_shards(const std::string& dir);

}  // namespace mpibert
