// `mpibert predict --questions FILE`'s reader: JSON Lines of questions and their contexts. Bad
// input must be an InputError, nothing else; every question read has its own context.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/data/question_lines.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const mpibert::SquadDataset questions =
        mpibert::read_question_lines("questions.jsonl", std::string(mpibert::fuzz::as_text(data, size)));
    if (questions.examples.empty() || questions.contexts.size() != questions.examples.size()) __builtin_trap();
    for (const auto& example : questions.examples) (void)questions.contexts.at(static_cast<size_t>(example.context_index));
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
