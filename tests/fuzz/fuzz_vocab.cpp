// vocab.txt: any bytes as a vocabulary; one that loads must tokenize text with every special.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("vocab.txt", mpibert::fuzz::as_text(data, size));
  try {
    mpibert::WordPieceTokenizer tokenizer(mpibert::Vocab::load(path));
    const mpibert::Encoding encoding = tokenizer.encode("Where is [UNK] the Denver Broncos' stadium? 北京 café");
    for (const std::string& token : tokenizer.tokens(encoding)) (void)token;
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
