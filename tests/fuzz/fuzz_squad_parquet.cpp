// SQuAD as Parquet (the HF Hub's layout: id, title, context, question, answers{text[],
// answer_start[]}), through the reader mpibert-prep uses: Apache Arrow's parquet::arrow reader from
// the pyarrow wheel (not instrumented: a fault inside it shows as a crash, not as a sanitizer
// report), then our checks of columns, types, nulls and answers. Bad input must be an InputError.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/data/squad_parquet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("train-00000-of-00001.parquet", mpibert::fuzz::as_text(data, size));
  try {
    mpibert::SquadAssembler assembler(path);
    mpibert::read_parquet_records(path, mpibert::SquadColumns{}, assembler);
    const mpibert::SquadDataset dataset = assembler.finish();
    for (const auto& example : dataset.examples) (void)dataset.contexts.at(static_cast<size_t>(example.context_index));
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
