// SQuAD JSON, plain or gzip (recognized by its magic bytes, as the product does), through the
// reader that mpibert-prep and `mpibert score` use. Bad input must be an InputError, nothing else.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/data/squad.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("dev.json", mpibert::fuzz::as_text(data, size));
  try {
    const mpibert::SquadDataset dataset = mpibert::read_squad(path);
    for (const auto& example : dataset.examples)  // every index the reader hands out is in range
      if (dataset.contexts.at(static_cast<size_t>(example.context_index)).empty() && !example.answers.empty()) __builtin_trap();
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
