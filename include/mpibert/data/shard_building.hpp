// What mpibert-prep does with the data, apart from the ranks: a shard of an example range, the
// split of articles across ranks, a dev set split by article, and a prepared directory's statistics.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/data/features.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/data/squad.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

namespace mpibert {

// The shard of examples [first, first + count) of `data`: features made with header.params,
// example records, and `header` completed with the example range and the feature count.
Shard build_shard(const SquadDataset& data, int64_t first_example, int64_t num_examples, const HfTokenizer& tokenizer,
                  ShardHeader header);

// Contiguous article ranges [first, first + count) per part, balanced by ArticleRange::cost.
// Contiguity keeps the global example order equal to file order whatever the number of parts.
std::vector<std::pair<int64_t, int64_t>> partition_articles(const std::vector<ArticleRange>& articles, int parts);

// Writes the articles [begin, end) of a SQuAD file (validated first) as a new SQuAD JSON file:
// how a dev set is split by article into train and eval parts. Negative bounds count from the end.
void write_article_subset(const std::string& input, int64_t begin, int64_t end, const std::string& output);

// Statistics of a prepared directory, as printed by `mpibert-prep inspect DIR`.
nlohmann::ordered_json inspect_shards(const std::string& dir);

}  // namespace mpibert
