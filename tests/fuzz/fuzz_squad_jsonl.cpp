// SQuAD as JSON Lines (a record a line, plain or gzip), through the reader mpibert-prep uses for
// it: records assembled into paragraphs and articles, answers checked against their contexts. Bad
// input must be an InputError, nothing else.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/data/squad_json_records.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("dev.jsonl", mpibert::fuzz::as_text(data, size));
  try {
    mpibert::SquadAssembler assembler(path);
    mpibert::read_json_lines(path, mpibert::read_file(path), mpibert::SquadColumns{}, assembler);
    const mpibert::SquadDataset dataset = assembler.finish();
    int64_t examples = 0;  // the articles cover the examples, and every index is in range
    for (const auto& article : dataset.articles) examples += article.num_examples;
    if (examples != static_cast<int64_t>(dataset.examples.size())) __builtin_trap();
    for (const auto& example : dataset.examples) (void)dataset.contexts.at(static_cast<size_t>(example.context_index));
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
