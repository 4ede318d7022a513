#include "mpibert/data/squad_answers.hpp"

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"

namespace mpibert {
namespace {

constexpr size_t kRecordsShown = 3;

}  // namespace

bool AnswerSpanCheck::check(const std::u32string& context, const std::string& text, int64_t start, const std::string& file,
                            const std::string& record) {
  std::u32string answer;
  if (auto bad = utf8::decode(text, answer))
    throw InputError(describe(file, record, "answer text is not valid UTF-8 (byte " + std::to_string(*bad) + ")"));
  if (answer.empty()) throw InputError(describe(file, record, "answer text is empty"));
  if (start < 0 || start > static_cast<int64_t>(context.size()) ||
      static_cast<int64_t>(answer.size()) > static_cast<int64_t>(context.size()) - start)
    throw InputError(describe(file, record,
                              "answer_start " + std::to_string(start) + " with an answer of " + std::to_string(answer.size()) +
                                  " characters falls outside the context (" + std::to_string(context.size()) + " characters)"));
  if (context.compare(static_cast<size_t>(start), answer.size(), answer) == 0) return true;
  if (mismatches_++ == 0) first_file_ = file;
  if (first_records_.size() < kRecordsShown) {
    const std::string found = utf8::encode(context.substr(static_cast<size_t>(start), answer.size()));
    first_records_.push_back(describe(file == first_file_ ? "" : file, record,
                                      "the context at answer_start " + std::to_string(start) + " reads " + quote_excerpt(found) +
                                          ", not the answer text " + quote_excerpt(text)));
  }
  return false;
}

void AnswerSpanCheck::finish() const {
  if (mismatches_ == 0) return;
  std::string problem = std::to_string(mismatches_) + (mismatches_ == 1
                                                           ? " answer does not match the context at its answer_start"
                                                           : " answers do not match the context at their answer_start");
  for (size_t i = 0; i < first_records_.size(); ++i) problem += (i == 0 ? ": " : "; ") + first_records_[i];
  if (mismatches_ > static_cast<int64_t>(first_records_.size()))
    problem += "; and " + std::to_string(mismatches_ - static_cast<int64_t>(first_records_.size())) + " more";
  throw InputError(describe(first_file_, "", problem));
}

}  // namespace mpibert
