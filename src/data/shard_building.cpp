#include "mpibert/data/shard_building.hpp"

#include <algorithm>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"

namespace mpibert {
namespace {

ExampleRecords example_records(const SquadDataset& data, int64_t first, int64_t count) {
  ExampleRecords records;
  int32_t last_context = -1;
  for (int64_t e = first; e < first + count; ++e) {
    const Example& example = data.examples[static_cast<size_t>(e)];
    if (example.context_index != last_context) {
      last_context = example.context_index;
      records.contexts.push_back(data.contexts[static_cast<size_t>(last_context)]);
    }
    nlohmann::json answers = nlohmann::json::array();
    for (const Answer& answer : example.answers) answers.push_back({{"text", answer.text}, {"answer_start", answer.start}});
    records.ids.push_back(example.id);
    records.questions.push_back(example.question);
    records.context_indices.push_back(static_cast<int32_t>(records.contexts.size() - 1));
    records.answers_json.push_back(answers.dump());
    records.is_impossible.push_back(example.is_impossible);
  }
  return records;
}

}  // namespace

Shard build_shard(const SquadDataset& data, int64_t first_example, int64_t num_examples, const HfTokenizer& tokenizer,
                  ShardHeader header) {
  Shard shard;
  shard.header = std::move(header);
  shard.header.first_example = first_example;
  shard.header.num_examples = num_examples;
  shard.features = make_features(data, first_example, num_examples, tokenizer, shard.header.params);
  shard.header.num_features = static_cast<int64_t>(shard.features.num_features());
  shard.examples = example_records(data, first_example, num_examples);
  return shard;
}

std::vector<std::pair<int64_t, int64_t>> partition_articles(const std::vector<ArticleRange>& articles, int parts) {
  std::vector<double> prefix(articles.size() + 1, 0.0);
  for (size_t i = 0; i < articles.size(); ++i) prefix[i + 1] = prefix[i] + articles[i].cost;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  size_t begin = 0;
  for (int part = 0; part < parts; ++part) {
    size_t end = articles.size();
    if (part + 1 < parts) {
      // The cut whose prefix cost is closest to this part's share of the total.
      const double target = prefix.back() * (part + 1) / parts;
      end = begin;
      while (end < articles.size() && prefix[end + 1] <= target) ++end;
      if (end < articles.size() && target - prefix[end] > prefix[end + 1] - target) ++end;
    }
    ranges.emplace_back(static_cast<int64_t>(begin), static_cast<int64_t>(end - begin));
    begin = end;
  }
  return ranges;
}

void write_article_subset(const std::string& input, int64_t begin, int64_t end, const std::string& output) {
  const std::string text = read_file(input);
  const SquadDataset data = parse_squad(input, text);  // reports bad input with its record
  const auto count = static_cast<int64_t>(data.articles.size());
  if (begin < 0) begin += count;
  if (end < 0) end += count;
  if (begin < 0 || end > count || begin >= end)
    throw InputError(describe(input, "",
                              "--articles " + std::to_string(begin) + ":" + std::to_string(end) +
                                  " is not a non-empty range of its " + std::to_string(count) + " articles"));
  nlohmann::ordered_json root = nlohmann::ordered_json::parse(text);
  auto& articles = root["data"];
  articles = nlohmann::ordered_json(articles.begin() + begin, articles.begin() + end);
  write_file_atomic(output, root.dump() + "\n");
}

nlohmann::ordered_json inspect_shards(const std::string& dir) {
  FeatureStore store = FeatureStore::open(dir);
  const Manifest& manifest = store.manifest();
  int64_t total_length = 0, max_length = 0, features_with_answer = 0, hf_start_overruns = 0;
  std::vector<int64_t> windows(static_cast<size_t>(store.num_examples()), 0);
  std::vector<bool> answer_inside(windows.size(), false);
  for (int64_t i = 0; i < store.num_features(); ++i) {
    const FeatureView feature = store.feature(i);
    const auto example = static_cast<size_t>(feature.example_index);
    total_length += feature.length;
    max_length = std::max<int64_t>(max_length, feature.length);
    ++windows[example];
    if (feature.start_position > 0) {
      answer_inside[example] = true;
      ++features_with_answer;
      // run_qa.py labels these [SEP]/padding: its start scan overruns the window (features.cpp).
      hf_start_overruns += feature.start_position == feature.length - 2;
    }
  }
  int64_t answerable = 0, answers_lost = 0, examples_truncated = 0, windows_truncated = 0;
  for (size_t e = 0; e < windows.size(); ++e) {
    if (windows[e] > 1) {
      ++examples_truncated;
      windows_truncated += windows[e];
    }
    if (store.example(static_cast<int64_t>(e)).is_impossible) continue;
    ++answerable;
    answers_lost += !answer_inside[e];
  }
  auto share = [](int64_t part, int64_t whole) {
    return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  };
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& shard : manifest.shards)
    shards.push_back({{"file", shard.file}, {"examples", shard.num_examples}, {"features", shard.num_features}});
  nlohmann::ordered_json stats = {
      {"dir", dir},
      {"split", manifest.split},
      {"max_seq_length", manifest.params.max_seq_length},
      {"doc_stride", manifest.params.doc_stride},
      {"max_query_length", manifest.params.max_query_length},
      {"tokenizer",
       {{"path", manifest.tokenizer_path},
        {"kind", manifest.tokenizer_kind},
        {"sha256", manifest.tokenizer_sha256},
        {"vocab_size", manifest.vocab_size},
        {"pad_id", manifest.pad_id},
        {"context_type_id", manifest.context_type_id}}},
      {"features", store.num_features()},
      {"examples", store.num_examples()},
      {"answerable_examples", answerable},
      {"mean_length", share(total_length, store.num_features())},
      {"max_length", max_length},
      {"windows_truncated", windows_truncated},
      {"windows_truncated_share", share(windows_truncated, store.num_features())},
      {"examples_truncated", examples_truncated},
      {"examples_truncated_share", share(examples_truncated, store.num_examples())},
      {"features_with_answer", features_with_answer},
      {"answers_not_covered", answers_lost},
      {"answers_not_covered_share", share(answers_lost, answerable)},
      {"hf_start_overrun_labels", hf_start_overruns},
      {"shards", shards},
  };
  return stats;
}

}  // namespace mpibert
