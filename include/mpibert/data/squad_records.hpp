// SQuAD as HF datasets hold it: one record a question (id, title, context, question, answers with
// the lists text and answer_start), as run_qa.py reads it from JSON, JSON Lines or Parquet. The
// assembler turns records, in file order, into the SquadDataset that SQuAD's nested JSON gives:
// consecutive records of one context become one paragraph, consecutive paragraphs with the same
// title one article (the unit split across ranks), and the examples keep file order.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mpibert/data/squad.hpp"
#include "mpibert/data/squad_answers.hpp"

namespace mpibert {

// The columns of a record, as run_qa.py names them (its question_column_name, context_column_name
// and answer_column_name); the answers column holds the lists "text" and "answer_start". A record
// without a title makes each of its paragraphs an article of its own.
struct SquadColumns {
  std::string id = "id", title = "title", context = "context", question = "question", answers = "answers";
};

struct SquadRecord {
  std::string id, context, question;
  std::optional<std::string> title;
  std::vector<std::string> answer_texts;
  std::vector<int64_t> answer_starts;
};

class SquadAssembler {
 public:
  // `origin` names the whole input (a path, a folder, a pattern) in the dataset.
  explicit SquadAssembler(std::string origin);
  // The next record; `file` and `where` name it in messages ("line 12", "row 40").
  void add(const SquadRecord& record, const std::string& file, const std::string& where);
  // The dataset; throws the answer mismatches counted (AnswerSpanCheck) if there are any.
  SquadDataset finish();

 private:
  void start_paragraph(const SquadRecord& record, bool new_article, const std::string& file, const std::string& where);

  SquadDataset data_;
  std::u32string context_chars_;  // the current paragraph's
  std::unordered_map<std::string, std::string> id_locations_;
  AnswerSpanCheck spans_;
};

// A record of a JSON object (flat JSON, JSON Lines): fields of another type or missing are
// InputErrors naming `file`, `where` and the column.
SquadRecord squad_record_from_json(const nlohmann::json& object, const SquadColumns& columns, const std::string& file,
                                   const std::string& where);

}  // namespace mpibert
