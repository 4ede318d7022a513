#include "mpibert/eval/squad_metrics.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <ostream>
#include <string_view>
#include <unordered_map>

#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

// ---- Python str semantics ------------------------------------------------------------------

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
char32_t simple_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t simple_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }

// Unicode's Cased property: letters with case, other characters with a case mapping (Roman
// numerals, circled letters), and the Other_Lowercase/Other_Uppercase ones without (ª, º, squared
// and negative circled letters; the modifier letters among them are case-ignorable anyway).
bool is_cased(char32_t c) {
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT || simple_lower(c) != c ||
         simple_upper(c) != c || c == U'\u00AA' || c == U'\u00BA' || (c >= 0x1F130 && c <= 0x1F149) ||
         (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

// Unicode's Case_Ignorable property: marks, format characters, modifiers, and the Word_Break
// MidLetter, MidNumLet and Single_Quote characters.
bool is_case_ignorable(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return true;
    default: break;
  }
  static constexpr char32_t kWordMiddles[] = {0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,  0x5F4,  0x2018, 0x2019,
                                              0x2024, 0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
  return std::find(std::begin(kWordMiddles), std::end(kWordMiddles), c) != std::end(kWordMiddles);
}

// Python's Final_Sigma rule: a capital sigma after a cased letter and not before one (skipping
// case-ignorable characters both ways) lowers to final 'ς'.
bool is_final_sigma(const std::u32string& text, size_t i) {
  size_t before = i;
  while (before > 0 && is_case_ignorable(text[before - 1])) --before;
  if (before == 0 || !is_cased(text[before - 1])) return false;
  size_t after = i + 1;
  while (after < text.size() && is_case_ignorable(text[after])) ++after;
  return after == text.size() || !is_cased(text[after]);
}

// str.lower(): the simple mappings, plus the two Python applies beyond them ('İ' → "i̇" and the
// final sigma).
std::u32string python_lower(const std::u32string& text) {
  std::u32string lowered;
  lowered.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == U'\u0130')
      lowered += U"i\u0307";
    else if (text[i] == U'\u03A3')
      lowered += is_final_sigma(text, i) ? U'\u03C2' : U'\u03C3';
    else
      lowered += simple_lower(text[i]);
  }
  return lowered;
}

// string.punctuation is ASCII only.
bool is_ascii_punctuation(char32_t c) {
  return c < 0x80 && std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~").find(static_cast<char>(c)) != std::string_view::npos;
}

// What re's Unicode \b counts as a word character: str.isalnum() or '_'.
bool is_word_char(char32_t c) {
  const auto cat = category(c);
  return c == U'_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// re.sub(r'\b(a|an|the)\b', ' ', text): every whole word a, an or the becomes a space.
std::u32string remove_articles(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (!is_word_char(text[i])) {
      out += text[i++];
      continue;
    }
    size_t end = i;
    while (end < text.size() && is_word_char(text[end])) ++end;
    const std::u32string_view word(text.data() + i, end - i);
    if (word == U"a" || word == U"an" || word == U"the")
      out += U' ';
    else
      out += word;
    i = end;
  }
  return out;
}

// ' '.join(text.split()).
std::string join_python_words(const std::u32string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && utf8::is_python_space(text[i])) ++i;
    if (i == text.size()) break;
    if (!out.empty()) out += ' ';
    for (; i < text.size() && !utf8::is_python_space(text[i]); ++i) utf8::append(out, text[i]);
  }
  return out;
}

std::vector<std::string> split_on_spaces(const std::string& normalized) {
  std::vector<std::string> tokens;
  for (size_t begin = 0; begin < normalized.size();) {
    size_t end = std::min(normalized.find(' ', begin), normalized.size());
    tokens.push_back(normalized.substr(begin, end - begin));
    begin = end + 1;
  }
  return tokens;
}

// ---- the scorers ---------------------------------------------------------------------------

// The official f1_score / compute_f1 on token lists.
double f1_of_tokens(const std::vector<std::string>& gold, const std::vector<std::string>& prediction, bool v2_rules) {
  if (v2_rules && (gold.empty() || prediction.empty())) return gold == prediction ? 1 : 0;
  std::unordered_map<std::string_view, int> unmatched_gold;  // Counter(gold) & Counter(prediction)
  for (const auto& token : gold) ++unmatched_gold[token];
  int num_same = 0;
  for (const auto& token : prediction) {
    auto it = unmatched_gold.find(token);
    if (it != unmatched_gold.end() && it->second > 0) --it->second, ++num_same;
  }
  if (num_same == 0) return 0;
  const double precision = 1.0 * num_same / static_cast<double>(prediction.size());
  const double recall = 1.0 * num_same / static_cast<double>(gold.size());
  return (2 * precision * recall) / (precision + recall);
}

struct QuestionScore {
  double exact = 0, f1 = 0;
};

// metric_max_over_ground_truths for both metrics. v2.0 drops gold answers that normalize to ""
// and, left with none, compares against "".
QuestionScore score_question(const Example& example, const std::string& prediction, bool v2_rules) {
  const std::string predicted = squad_normalize_answer(prediction);
  const std::vector<std::string> predicted_tokens = split_on_spaces(predicted);
  QuestionScore best;
  bool any_gold = false;
  auto score_against = [&](const std::string& gold_normalized) {
    best.exact = std::max(best.exact, gold_normalized == predicted ? 1.0 : 0.0);
    best.f1 = std::max(best.f1, f1_of_tokens(split_on_spaces(gold_normalized), predicted_tokens, v2_rules));
    any_gold = true;
  };
  for (const auto& answer : example.answers) {
    std::string gold = squad_normalize_answer(answer.text);
    if (!v2_rules || !gold.empty()) score_against(gold);
  }
  if (v2_rules && !any_gold) score_against("");
  return best;
}

std::unordered_map<std::string_view, const std::string*> answers_by_id(const SquadPredictions& predictions) {
  std::unordered_map<std::string_view, const std::string*> answer_of;
  for (const auto& [id, answer] : predictions) answer_of[id] = &answer;
  return answer_of;
}

double percent(double sum, size_t total) { return 100.0 * sum / static_cast<double>(total); }

nlohmann::ordered_json score_v1(const SquadDataset& data, const SquadPredictions& predictions, std::ostream& diagnostics) {
  const auto answer_of = answers_by_id(predictions);
  double exact_sum = 0, f1_sum = 0;
  for (const auto& example : data.examples) {
    auto it = answer_of.find(example.id);
    if (it == answer_of.end()) {
      diagnostics << "Unanswered question " << example.id << " will receive score 0.\n";
      continue;
    }
    const QuestionScore score = score_question(example, *it->second, false);
    exact_sum += score.exact;
    f1_sum += score.f1;
  }
  return {{"exact_match", percent(exact_sum, data.examples.size())}, {"f1", percent(f1_sum, data.examples.size())}};
}

struct ScoredQuestion {
  const Example* example;
  const std::string* prediction;
  QuestionScore raw;          // get_raw_scores
  QuestionScore thresholded;  // apply_no_ans_threshold
  bool has_answer() const { return !example->answers.empty(); }
};

// The official v2.0 script stops with a KeyError on ids it lacks; say which instead.
InputError missing_for_questions(const std::string& source, const std::string& what, const std::vector<std::string>& ids) {
  std::string listed;
  for (size_t i = 0; i < ids.size() && i < 5; ++i) listed += (i ? ", " : "") + ids[i];
  return InputError(describe(source, "",
                             "no " + what + " for " + std::to_string(ids.size()) + " of the questions: " + listed +
                                 (ids.size() > 5 ? ", ..." : "") + " (the official v2.0 scorer stops with a KeyError)"));
}

// find_best_thresh: sweeps the threshold up through the no-answer probabilities, stable-sorted
// (ties keep file order). It counts any non-empty prediction for an unanswerable question as
// wrong, even one that normalizes to "", as the official script does.
std::pair<double, nlohmann::ordered_json> find_best_threshold(const std::vector<ScoredQuestion>& scored,
                                                              const std::vector<const NoAnswerProbability*>& ascending,
                                                              double QuestionScore::*metric, size_t num_no_answer) {
  std::unordered_map<std::string_view, const ScoredQuestion*> scored_by_id;
  for (const auto& question : scored) scored_by_id[question.example->id] = &question;
  double current = static_cast<double>(num_no_answer), best = current;
  const NoAnswerProbability* best_at = nullptr;
  for (const NoAnswerProbability* entry : ascending) {
    auto it = scored_by_id.find(entry->id);
    if (it == scored_by_id.end()) continue;
    const ScoredQuestion& question = *it->second;
    current += question.has_answer() ? question.raw.*metric : (question.prediction->empty() ? 0 : -1);
    if (current > best) best = current, best_at = entry;
  }
  nlohmann::ordered_json threshold = 0.0;
  if (best_at != nullptr && best_at->written_as_integer)
    threshold = static_cast<int64_t>(best_at->value);
  else if (best_at != nullptr)
    threshold = best_at->value;
  return {percent(best, scored.size()), threshold};
}

nlohmann::ordered_json score_v2(const SquadDataset& data, const SquadPredictions& predictions, const ScoreOptions& options,
                                std::ostream& diagnostics) {
  const auto answer_of = answers_by_id(predictions);
  std::vector<ScoredQuestion> scored;
  std::vector<std::string> unpredicted;
  for (const auto& example : data.examples) {
    auto it = answer_of.find(example.id);
    if (it == answer_of.end()) {
      diagnostics << "Missing prediction for " << example.id << '\n';
      unpredicted.push_back(example.id);
      continue;
    }
    const QuestionScore raw = score_question(example, *it->second, true);
    scored.push_back({&example, it->second, raw, raw});
  }
  if (!unpredicted.empty()) throw missing_for_questions(options.predictions_name, "prediction", unpredicted);

  // apply_no_ans_threshold. Without a file every no-answer probability is 0.0.
  std::unordered_map<std::string_view, double> na_prob_of;
  if (options.na_probs) {
    for (const auto& entry : *options.na_probs) na_prob_of[entry.id] = entry.value;
    std::vector<std::string> without_na_prob;
    for (const auto& question : scored)
      if (na_prob_of.count(question.example->id) == 0) without_na_prob.push_back(question.example->id);
    if (!without_na_prob.empty()) throw missing_for_questions(options.na_probs_name, "no-answer probability", without_na_prob);
  }
  for (auto& question : scored) {
    auto it = na_prob_of.find(question.example->id);
    if ((it == na_prob_of.end() ? 0.0 : it->second) > options.na_prob_thresh)
      question.thresholded.exact = question.thresholded.f1 = question.has_answer() ? 0.0 : 1.0;
  }

  // make_eval_dict, summing in dataset order as Python sums dict values.
  nlohmann::ordered_json result;
  auto add_group = [&](const std::string& prefix, auto&& include) {
    double exact_sum = 0, f1_sum = 0;
    size_t total = 0;
    for (const auto& question : scored)
      if (include(question)) exact_sum += question.thresholded.exact, f1_sum += question.thresholded.f1, ++total;
    if (total == 0) return;
    result[prefix + "exact"] = percent(exact_sum, total);
    result[prefix + "f1"] = percent(f1_sum, total);
    result[prefix + "total"] = total;
  };
  add_group("", [](const ScoredQuestion&) { return true; });
  add_group("HasAns_", [](const ScoredQuestion& q) { return q.has_answer(); });
  add_group("NoAns_", [](const ScoredQuestion& q) { return !q.has_answer(); });

  if (options.na_probs) {
    std::vector<const NoAnswerProbability*> ascending;
    for (const auto& entry : *options.na_probs) ascending.push_back(&entry);
    std::stable_sort(ascending.begin(), ascending.end(), [](auto* a, auto* b) { return a->value < b->value; });
    const size_t num_no_answer = static_cast<size_t>(std::count_if(data.examples.begin(), data.examples.end(),
                                                                   [](const Example& e) { return e.answers.empty(); }));
    auto [best_exact, exact_threshold] = find_best_threshold(scored, ascending, &QuestionScore::exact, num_no_answer);
    auto [best_f1, f1_threshold] = find_best_threshold(scored, ascending, &QuestionScore::f1, num_no_answer);
    result["best_exact"] = best_exact;
    result["best_exact_thresh"] = exact_threshold;
    result["best_f1"] = best_f1;
    result["best_f1_thresh"] = f1_threshold;
  }
  return result;
}

// ---- JSON input ----------------------------------------------------------------------------

// SAX handler collecting the members of a top-level JSON object with Python's dict semantics: in
// file order, a repeated key keeping its first position and taking its last value. (ordered_json
// does the same in quadratic time.) Nested values are kept as empty objects/arrays, for messages.
class TopLevelMembers {
 public:
  using json = nlohmann::json;
  explicit TopLevelMembers(const std::string& path) : path_(path) {}

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(json::number_integer_t v) { return value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(v); }
  bool string(json::string_t& v) { return value(std::move(v)); }
  bool binary(json::binary_t& v) { return value(json::binary(v)); }
  bool start_object(std::size_t) {
    if (depth_ == 1) value(json::object());
    return ++depth_, true;
  }
  bool start_array(std::size_t) {
    if (depth_ <= 1) value(json::array());
    return ++depth_, true;
  }
  bool end_object() { return --depth_, true; }
  bool end_array() { return --depth_, true; }
  bool key(json::string_t& k) {
    if (depth_ == 1) key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    throw InputError(describe(path_, "", std::string("not valid JSON: ") + e.what()));
  }

  std::vector<std::pair<std::string, json>> members;

 private:
  bool value(json v) {
    if (depth_ == 0)
      throw InputError(describe(path_, "", std::string("must be a JSON object keyed by question id, not ") + v.type_name()));
    if (depth_ != 1) return true;  // inside a nested value
    auto [it, inserted] = index_.emplace(key_, members.size());
    if (inserted)
      members.emplace_back(key_, std::move(v));
    else
      members[it->second].second = std::move(v);
    return true;
  }

  std::string path_, key_;
  int depth_ = 0;
  std::unordered_map<std::string, size_t> index_;
};

std::vector<std::pair<std::string, nlohmann::json>> read_top_level_members(const std::string& path) {
  TopLevelMembers handler(path);
  nlohmann::json::sax_parse(read_file(path), &handler);
  return std::move(handler.members);
}

std::string with_article(const char* type_name) {
  return (std::string_view("aeiou").find(type_name[0]) != std::string_view::npos ? "an " : "a ") + std::string(type_name);
}

}  // namespace

// ---- public API ----------------------------------------------------------------------------

std::string squad_normalize_answer(const std::string& text) {
  std::u32string chars;
  if (auto bad = utf8::decode(text, chars))
    throw InputError(describe("", "answer " + quote_excerpt(text), "invalid UTF-8 at byte " + std::to_string(*bad)));
  std::u32string lowered = python_lower(chars);
  lowered.erase(std::remove_if(lowered.begin(), lowered.end(), is_ascii_punctuation), lowered.end());
  return join_python_words(remove_articles(lowered));
}

std::vector<std::string> squad_answer_tokens(const std::string& text) { return split_on_spaces(squad_normalize_answer(text)); }

double squad_f1(const std::string& gold, const std::string& prediction, bool v2_rules) {
  return f1_of_tokens(squad_answer_tokens(gold), squad_answer_tokens(prediction), v2_rules);
}

bool squad_exact(const std::string& gold, const std::string& prediction) {
  return squad_normalize_answer(gold) == squad_normalize_answer(prediction);
}

bool uses_squad_v2_rules(const SquadDataset& data) {
  return data.version.rfind("v2", 0) == 0 ||
         std::any_of(data.examples.begin(), data.examples.end(), [](const Example& e) { return e.answers.empty(); });
}

nlohmann::ordered_json score_squad(const SquadDataset& data, const SquadPredictions& predictions, const ScoreOptions& options,
                                   std::ostream& diagnostics) {
  if (data.examples.empty()) throw InputError(describe(data.path, "", "no questions to score"));
  if (!options.v2) {
    if (options.na_probs)
      throw InputError(describe(options.na_probs_name, "",
                                "no-answer probabilities apply to SQuAD v2.0 only, and " + data.path + " has version \"" +
                                    data.version + "\""));
    return score_v1(data, predictions, diagnostics);
  }
  return score_v2(data, predictions, options, diagnostics);
}

SquadPredictions read_squad_predictions(const std::string& path) {
  SquadPredictions predictions;
  for (auto& [id, value] : read_top_level_members(path)) {
    if (!value.is_string())
      throw InputError(describe(path, "id " + id, "the prediction must be a string, not " + with_article(value.type_name())));
    predictions.emplace_back(id, value.get<std::string>());
  }
  return predictions;
}

std::vector<NoAnswerProbability> read_no_answer_probabilities(const std::string& path) {
  std::vector<NoAnswerProbability> probabilities;
  for (auto& [id, value] : read_top_level_members(path)) {
    if (!value.is_number())
      throw InputError(describe(path, "id " + id,
                                "the no-answer probability must be a number, not " + with_article(value.type_name())));
    probabilities.push_back({id, value.get<double>(), value.is_number_integer()});
  }
  return probabilities;
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";  // json.dumps spellings
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits (as Python's repr), then laid out by repr's rule: positional for
  // decimal exponents in [-4, 16), else scientific.
  char buffer[40] = {};  // zeroed: atoi below reads up to the terminator
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific).ptr;
  const std::string_view scientific(buffer, static_cast<size_t>(end - buffer));  // "-d.ddde+XX"
  const size_t e = scientific.find('e');
  const std::string sign = std::signbit(value) ? "-" : "";
  std::string digits;
  for (char c : scientific.substr(0, e))
    if (c != '-' && c != '.') digits += c;
  const int exponent = std::atoi(scientific.data() + e + 1);

  if (exponent < -4 || exponent >= 16)  // to_chars already writes the exponent as repr does: "e-05", "e+308"
    return sign + digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + std::string(scientific.substr(e));
  if (exponent < 0) return sign + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const auto integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) return sign + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

std::string python_json_dumps(const nlohmann::ordered_json& flat_object, bool indent) {
  if (flat_object.empty()) return "{}";
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : flat_object.items()) {
    out += indent ? (first ? "\n  " : ",\n  ") : (first ? "" : ", ");
    first = false;
    out += nlohmann::json(key).dump(-1, ' ', true) + ": ";
    out += value.is_number_float() ? python_float_repr(value.get<double>()) : value.dump(-1, ' ', true);
  }
  return out + (indent ? "\n}" : "}");
}

}  // namespace mpibert
