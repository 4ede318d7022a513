// C++ ports of the official SQuAD scorers, evaluate-v1.1.py and evaluate-v2.0.py, reproducing
// their numbers and their printed output exactly (Python 3.11 string and float semantics).
#pragma once

#include <nlohmann/json.hpp>

#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpibert/data/squad.hpp"

namespace mpibert {

// The official normalize_answer: Python str.lower() (full Unicode mapping, final sigma), drop ASCII
// punctuation, replace the words a/an/the by a space (Unicode \b), then ' '.join(text.split()).
std::string squad_normalize_answer(const std::string& text);

// normalize_answer(text).split(): the tokens F1 counts (v2.0's get_tokens gives the same list).
std::vector<std::string> squad_answer_tokens(const std::string& text);

// Token F1 of one prediction against one gold answer. v2 rules: when either side has no tokens,
// F1 is 1 if both have none, else 0 (v1.1 gives 0 whenever nothing overlaps).
double squad_f1(const std::string& gold, const std::string& prediction, bool v2_rules);
bool squad_exact(const std::string& gold, const std::string& prediction);

// One entry of a no-answer probability file. Python keeps a JSON integer as an int, so a best
// threshold taken from one prints as "1", not "1.0".
struct NoAnswerProbability {
  std::string id;
  double value = 0;
  bool written_as_integer = false;
};

struct ScoreOptions {
  bool v2 = false;  // evaluate-v2.0.py rather than evaluate-v1.1.py
  // v2 only: --na-prob-file entries in file order (their order breaks ties in best_*_thresh).
  std::optional<std::vector<NoAnswerProbability>> na_probs;
  double na_prob_thresh = 1.0;
  // Names of the inputs, for error messages.
  std::string predictions_name = "predictions";
  std::string na_probs_name = "no-answer probabilities";
};

// Predictions in file order, as {question id, answer}.
using SquadPredictions = std::vector<std::pair<std::string, std::string>>;

// The official evaluate(): {"exact_match", "f1"} for v1.1; for v2.0 {"exact", "f1", "total",
// "HasAns_*", "NoAns_*"} plus "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh" when
// na_probs is set. The script's per-question messages ("Unanswered question ..." for v1.1,
// "Missing prediction for ..." for v2.0) go to `diagnostics`. Where the v2.0 script would stop
// with a KeyError (a question without a prediction or without a no-answer probability), this
// throws an InputError naming the missing ids.
nlohmann::ordered_json score_squad(const SquadDataset& data, const SquadPredictions& predictions, const ScoreOptions& options,
                                   std::ostream& diagnostics);

// The v2.0 rules apply when the dataset's version starts with "v2" or a question has no answer.
bool uses_squad_v2_rules(const SquadDataset& data);

// Readers for the JSON files the scorers take (plain or gzip). Like Python's json.load, a repeated
// id keeps its first position and takes its last value. Bad input is an InputError naming the
// file and the id.
SquadPredictions read_squad_predictions(const std::string& path);
std::vector<NoAnswerProbability> read_no_answer_probabilities(const std::string& path);

// Python's repr(float) and json.dumps of a flat object of numbers: compact with ", " and ": "
// separators, or with indent=2.
std::string python_float_repr(double value);
std::string python_json_dumps(const nlohmann::ordered_json& flat_object, bool indent);

}  // namespace mpibert
