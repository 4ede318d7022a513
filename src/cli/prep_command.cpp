#include "mpibert/cli/prep_command.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>
#include <regex>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/time.hpp"
#include "mpibert/data/features.hpp"
#include "mpibert/data/shard_building.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/data/squad_input.hpp"
#include "mpibert/runtime/host_collectives.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

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
  if (existing.tokenizer_sha256 != wanted.tokenizer_sha256)
    return differs("tokenizer sha256", existing.tokenizer_sha256, wanted.tokenizer_sha256);
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

}  // namespace

int run_prep(const PrepOptions& options, int rank, int world_size) {
  const auto started = Clock::now();
  const std::string final_path = options.out_dir + "/" + shard_file_name(rank, world_size);
  const std::string temporary_path = temporary_path_for(final_path);

  // Phase 1, identical on every rank: read and validate inputs, check the output directory.
  // Every rank hits the same errors, so only the lowest failing rank reports.
  ShardHeader header;
  SquadInput input;
  std::unique_ptr<HfTokenizer> tokenizer;
  std::string error;
  try {
    if (options.split != "train" && options.split != "eval")
      throw InputError(describe("--split", options.split, "must be train or eval"));
    tokenizer = std::make_unique<HfTokenizer>(HfTokenizer::load(options.tokenizer));
    context_type_id(*tokenizer);  // a tokenizer whose features mpibert cannot build is refused here
    input = read_squad_input(SquadSource{options.input, options.dataset_name, options.dataset_config, options.split,
                                         options.columns});
    header.split = options.split;
    header.params = options.params;
    header.input_sha256 = squad_content_sha256(input.data);  // the same whatever format carried it
    header.tokenizer_sha256 = tokenizer->digest();
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
  const SquadDataset& data = input.data;
  spdlog::info("read {} ({}, {} file(s)): {} articles, {} questions; tokenizer {} ({} tokens)", input.origin, input.format,
               input.files.size(), data.articles.size(), data.examples.size(), tokenizer->description(), tokenizer->vocab_size());

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
      manifest.input_path = input.origin;
      manifest.input_sha256 = header.input_sha256;
      manifest.tokenizer_path = options.tokenizer;
      manifest.tokenizer_sha256 = header.tokenizer_sha256;
      manifest.tokenizer_kind = tokenizer->description();
      manifest.vocab_size = static_cast<int64_t>(tokenizer->vocab_size());
      manifest.pad_id = tokenizer->pad_id();
      manifest.context_type_id = context_type_id(*tokenizer);
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

}  // namespace mpibert
