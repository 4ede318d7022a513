// The check of SQuAD answers against their context that every reader applies, whatever the file
// format: an empty answer or an answer_start outside its context is an InputError at once; an
// answer text that the context does not read at answer_start is counted, and all of them are
// reported together once the whole input is read (how many, and the first ones with their record).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpibert {

class AnswerSpanCheck {
 public:
  // `context` in code points, as SQuAD's answer_start counts; `file` and `record` name the answer
  // in messages ("data[0].paragraphs[1].qas[2] (id x).answers[0]", "row 7 (id x).answers.text[0]").
  // Returns whether the answer reads as its text.
  bool check(const std::u32string& context, const std::string& text, int64_t start, const std::string& file,
             const std::string& record);
  // Throws the InputError that reports the mismatches counted, if any.
  void finish() const;
  int64_t mismatches() const { return mismatches_; }

 private:
  int64_t mismatches_ = 0;
  std::string first_file_;
  std::vector<std::string> first_records_;  // the first few, with what the context reads
};

}  // namespace mpibert
