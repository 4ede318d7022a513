// vocab.txt: any bytes as a vocabulary; one that loads (as an uncased BERT's WordPiece) must
// tokenize text with every special.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("vocab.txt", mpibert::fuzz::as_text(data, size));
  try {
    const mpibert::HfTokenizer tokenizer = mpibert::HfTokenizer::load(path);
    const mpibert::TokenizedText encoding = tokenizer.encode("Where is [UNK] the Denver Broncos' stadium? 北京 café");
    for (int32_t id : encoding.ids)
      if (id < 0 || static_cast<size_t>(id) >= tokenizer.vocab_size()) __builtin_trap();
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
