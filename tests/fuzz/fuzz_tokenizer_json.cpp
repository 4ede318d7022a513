// tokenizer.json: any bytes as HF's tokenizer file. One that does not load is an InputError (a
// component it does not implement named, never approximated); one that loads tokenizes text with
// ids in its vocabulary and offsets inside the text, and adds special tokens of its vocabulary.
#include <algorithm>

#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("tokenizer.json", mpibert::fuzz::as_text(data, size));
  try {
    const mpibert::HfTokenizer tokenizer = mpibert::HfTokenizer::load(path);
    const std::string text = "Where is  the Denver Broncos' stadium?\t北京 café 1999 [MASK] <s> ▁x";
    const auto code_points =
        static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
    const mpibert::TokenizedText encoding = tokenizer.encode(text);
    for (size_t i = 0; i < encoding.size(); ++i) {
      if (encoding.ids[i] < 0 || static_cast<size_t>(encoding.ids[i]) >= tokenizer.vocab_size()) __builtin_trap();
      if (encoding.offsets[i].begin > encoding.offsets[i].end || encoding.offsets[i].end > code_points) __builtin_trap();
    }
    for (const mpibert::SequenceTemplate* around : {&tokenizer.single(), &tokenizer.pair()})
      for (const auto* specials : {&around->before, &around->between, &around->after})
        for (const mpibert::SpecialToken& special : *specials)
          if (special.id < 0 || static_cast<size_t>(special.id) >= tokenizer.vocab_size()) __builtin_trap();
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
