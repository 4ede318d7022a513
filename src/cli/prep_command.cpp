#include "mpibert/prep.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <regex>

#include "mpibert/comm.hpp"
#include "mpibert/error.hpp"
#include "mpibert/io.hpp"
#include "mpibert/shards.hpp"
#include "mpibert/tokenizer.hpp"

namespace fs = std::filesystem;

namespace mpibert {
namespace {

bool same_parameters(const FeatureParams& a, const FeatureParams& b) {
  return a.max_seq_length == b.max_seq_length && a.doc_stride == b.doc_stride && a.max_query_length == b.max_query_length;
}

// What makes two shard sets interchangeable; empty when they are.
std::string parameter_difference(const ShardHeader& existing, const ShardHeader& wanted) {
  auto differs = [](const std::string& name, const auto& old_value, const auto& new_value) {
    return name + " " + old_value + " (now " + new_value + ")";
  };
  if (existing.format_version != wanted.format_version)
    return differs("format_version", std::to_string(existing.format_version), std::to_string(wanted.format_version));
  if (existing.split != wanted.split) return differs("split", existing.split, wanted.split);
  if (!same_parameters(existing.params, wanted.params)) {
    auto show = [](const FeatureParams& p) {
      return "max_seq_length=" + std::to_string(p.max_seq_length) + " doc_stride=" + std::to_string(p.doc_stride) +
             " max_query_length=" + std::to_string(p.max_query_length);
    };
    return differs("parameters", show(existing.params), show(wanted.params));
  }
  if (existing.input_sha256 != wanted.input_sha256) return differs("input sha256", existing.input_sha256, wanted.input_sha256);
  if (existing.vocab_sha256 != wanted.vocab_sha256) return differs("vocab sha256", existing.vocab_sha256, wanted.vocab_sha256);
  return {};
}

bool is_shard_file_name(const std::string& name) {
  static const std::regex pattern(R"(shard-\d{5}-of-\d{5}\.h5)");
  return std::regex_match(name, pattern);
}

// Refuses an output directory holding shards made from other inputs or parameters.
void check_output_directory(const std::string& dir, const ShardHeader& wanted, bool overwrite) {
  if (!fs::exists(dir)) return;
  if (!fs::is_directory(dir)) throw InputError(describe(dir, "", "--out exists and is not a directory"));
  if (overwrite) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!is_shard_file_name(name)) continue;
    ShardHeader existing = read_shard_header(entry.path().string());
    std::string difference = parameter_difference(existing, wanted);
    if (!difference.empty())
      throw InputError(describe(entry.path().string(), "",
                                "the output directory holds shards made with other " + difference +
                                    "; choose another --out, remove them, or pass --overwrite"));
  }
}

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

// Removes shard files of an earlier run that the new manifest no longer lists.
void remove_stale_shards(const std::string& dir, const Manifest& manifest) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!is_shard_file_name(name)) continue;
    bool listed = false;
    for (const auto& shard : manifest.shards) listed = listed || shard.file == name;
    if (!listed) remove_quietly(entry.path().string());
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Shard build_shard(const SquadDataset& data, int64_t first_example, int64_t num_examples, const WordPieceTokenizer& tokenizer,
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

int run_prep(const PrepOptions& options, int rank, int world_size) {
  const auto started = std::chrono::steady_clock::now();
  const std::string final_path = options.out_dir + "/" + shard_file_name(rank, world_size);
  const std::string temporary_path = temporary_path_for(final_path);

  // Phase 1, identical on every rank: read and validate inputs, check the output directory.
  // Every rank hits the same errors, so only the lowest failing rank reports.
  ShardHeader header;
  SquadDataset data;
  std::unique_ptr<WordPieceTokenizer> tokenizer;
  std::string error;
  try {
    if (options.split != "train" && options.split != "eval")
      throw InputError(describe("--split", options.split, "must be train or eval"));
    tokenizer = std::make_unique<WordPieceTokenizer>(Vocab::load(options.vocab));
    data = read_squad(options.input);
    header.split = options.split;
    header.params = options.params;
    header.input_sha256 = sha256_file(options.input);
    header.vocab_sha256 = sha256_file(options.vocab);
    header.tool_version = MPIBERT_VERSION;
    header.shard_index = rank;
    header.num_shards = world_size;
    check_output_directory(options.out_dir, header, options.overwrite);
    if (rank == 0) fs::create_directories(options.out_dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (int failed = lowest_failing_rank(error.empty()); failed >= 0) {
    if (failed == rank) spdlog::error("{}", error);
    return 1;
  }
  spdlog::info("read {}: SQuAD {} with {} articles, {} questions; vocab {} ({} tokens)", options.input, data.version,
               data.articles.size(), data.examples.size(), options.vocab, tokenizer->vocab().size());

  // Phase 2, this rank's share: features of whole articles, written under a temporary name.
  const auto [first_article, num_articles] = partition_articles(data.articles, world_size)[static_cast<size_t>(rank)];
  int64_t first_example = static_cast<int64_t>(data.examples.size()), num_examples = 0;
  if (num_articles > 0) {
    const ArticleRange& first = data.articles[static_cast<size_t>(first_article)];
    const ArticleRange& last = data.articles[static_cast<size_t>(first_article + num_articles - 1)];
    first_example = first.first_example;
    num_examples = last.first_example + last.num_examples - first.first_example;
  } else if (first_article < static_cast<int64_t>(data.articles.size())) {
    first_example = data.articles[static_cast<size_t>(first_article)].first_example;
  }
  Shard shard;
  try {
    shard = build_shard(data, first_example, num_examples, *tokenizer, header);
    write_shard(temporary_path, shard);
  } catch (const std::exception& e) {
    error = e.what();
    spdlog::error("{}", error);
    remove_quietly(temporary_path);
  }
  if (!all_ranks_ok(error.empty())) {
    remove_quietly(temporary_path);
    return 1;
  }

  // Phase 3: every shard exists; give them their final names, then rank 0 writes the manifest.
  try {
    rename_file(temporary_path, final_path);
  } catch (const std::exception& e) {
    error = e.what();
    spdlog::error("{}", error);
  }
  if (!all_ranks_ok(error.empty())) {
    remove_quietly(temporary_path);
    remove_quietly(final_path);
    return 1;
  }
  const std::vector<int64_t> counts =
      gather_to_root({shard.header.first_example, shard.header.num_examples, shard.header.num_features});
  Manifest manifest;
  if (rank == 0) {
    try {
      manifest.tool_version = MPIBERT_VERSION;
      manifest.split = options.split;
      manifest.params = options.params;
      manifest.input_path = options.input;
      manifest.input_sha256 = header.input_sha256;
      manifest.vocab_path = options.vocab;
      manifest.vocab_sha256 = header.vocab_sha256;
      manifest.vocab_size = static_cast<int64_t>(tokenizer->vocab().size());
      for (int r = 0; r < world_size; ++r) {
        ShardEntry entry{shard_file_name(r, world_size), counts[3 * r], counts[3 * r + 1], counts[3 * r + 2]};
        manifest.num_examples += entry.num_examples;
        manifest.num_features += entry.num_features;
        manifest.shards.push_back(entry);
      }
      write_file_atomic(options.out_dir + "/" + kManifestName, manifest_to_json(manifest));
      remove_stale_shards(options.out_dir, manifest);
    } catch (const std::exception& e) {
      error = e.what();
      spdlog::error("{}", error);
    }
  }
  if (!all_ranks_ok(error.empty())) {
    remove_quietly(final_path);
    return 1;
  }
  const double seconds = max_over_ranks(seconds_since(started));
  if (rank == 0)
    spdlog::info("wrote {} features of {} examples to {} in {} shard(s) in {:.2f} s", manifest.num_features,
                 manifest.num_examples, options.out_dir, world_size, seconds);
  return 0;
}

void write_article_subset(const std::string& input, int64_t begin, int64_t end, const std::string& output) {
  const std::string text = read_file(input);
  const SquadDataset data = parse_squad(input, text);  // reports bad input with its record
  const auto count = static_cast<int64_t>(data.articles.size());
  if (begin < 0) begin += count;
  if (end < 0) end += count;
  if (begin < 0 || end > count || begin >= end)
    throw InputError(describe(input, "", "--articles " + std::to_string(begin) + ":" + std::to_string(end) +
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
  auto share = [](int64_t part, int64_t whole) { return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0; };
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& shard : manifest.shards)
    shards.push_back({{"file", shard.file}, {"examples", shard.num_examples}, {"features", shard.num_features}});
  nlohmann::ordered_json stats = {
      {"dir", dir},
      {"split", manifest.split},
      {"max_seq_length", manifest.params.max_seq_length},
      {"doc_stride", manifest.params.doc_stride},
      {"max_query_length", manifest.params.max_query_length},
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
