// SQuAD v1.1 / v2.0 reading and validation. Every problem is an InputError naming the file, the
// record (JSON path and question id) and what is wrong.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mpibert {

struct Answer {
  std::string text;
  int32_t start = 0;  // in code points into the paragraph context, as SQuAD counts
};

struct Example {
  std::string id;
  std::string question;         // as in the file (not yet stripped)
  int32_t context_index = 0;    // into SquadDataset::contexts
  std::vector<Answer> answers;  // empty for unanswerable v2.0 questions
  bool is_impossible = false;
};

// Contiguous ranges of one article: articles are the unit of work split across ranks.
struct ArticleRange {
  std::string title;
  int64_t first_context = 0, num_contexts = 0;
  int64_t first_example = 0, num_examples = 0;
  // Rough preparation cost, used to balance ranks: question count times context length.
  double cost = 0;
};

struct SquadDataset {
  std::string path;
  std::string version;  // "1.1", "v2.0", ... as in the file
  std::vector<std::string> contexts;
  std::vector<Example> examples;  // in file order: the global example index is the position here
  std::vector<ArticleRange> articles;
};

// A dataset of one question about one context (one article), e.g. for `mpibert predict`.
// `origin` names it in error messages; no answers means unanswerable.
SquadDataset single_question(const std::string& origin, const std::string& id, const std::string& context,
                             const std::string& question, std::vector<Answer> answers = {});

// Parses and validates a SQuAD JSON file, plain or gzip. Checks: valid JSON and UTF-8, schema
// (data/paragraphs/context/qas/id/question/answers), unique ids, answer_start inside the context
// and matching the answer text, is_impossible consistent with answers.
SquadDataset read_squad(const std::string& path);
SquadDataset parse_squad(const std::string& path, const std::string& json_text);
// The same checks on a document already parsed (squad_input.hpp reads the other layouts).
SquadDataset squad_from_json(const std::string& path, const nlohmann::json& root);

// Hex SHA-256 of what was read, not of the files that carried it: articles (title, paragraph and
// question counts), contexts, and each question's id, question, paragraph and answers, in order.
// The same articles in any format have the same digest (mpibert-prep records it as the shards' input_sha256).
std::string squad_content_sha256(const SquadDataset& data);

}  // namespace mpibert
