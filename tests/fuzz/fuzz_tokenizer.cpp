// Text on arbitrary bytes through the tokenizers of tests/fixtures/tokenizers (WordPiece, byte-level
// BPE, SentencePiece Unigram and BPE; the first byte picks one): invalid UTF-8 is an InputError;
// valid text gives ids in the vocabulary and offsets inside the text, each starting no earlier than
// the one before.
#include <utf8proc.h>

#include <memory>
#include <vector>

#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

namespace {
const std::vector<std::unique_ptr<mpibert::HfTokenizer>>& tokenizers() {
  static const auto instances = [] {
    std::vector<std::unique_ptr<mpibert::HfTokenizer>> loaded;
    for (const char* name : {"wordpiece-uncased", "roberta", "modernbert", "deberta-v3", "xlm-roberta"})
      loaded.push_back(
          std::make_unique<mpibert::HfTokenizer>(mpibert::HfTokenizer::load(std::string(MPIBERT_FUZZ_TOKENIZERS) + "/" + name)));
    return loaded;
  }();
  return instances;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const mpibert::HfTokenizer& tokenizer = *tokenizers()[data[0] % tokenizers().size()];
  const std::string_view text = mpibert::fuzz::as_text(data + 1, size - 1);
  try {
    const mpibert::TokenizedText encoding = tokenizer.encode(text);
    const auto code_points = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                                static_cast<utf8proc_ssize_t>(text.size()), nullptr, 0, UTF8PROC_STABLE);
    int32_t previous_begin = 0;
    for (size_t i = 0; i < encoding.size(); ++i) {
      const auto& span = encoding.offsets[i];
      if (encoding.ids[i] < 0 || static_cast<size_t>(encoding.ids[i]) >= tokenizer.vocab_size()) __builtin_trap();
      if (span.begin < previous_begin || span.end < span.begin || (code_points >= 0 && span.end > code_points)) __builtin_trap();
      previous_begin = span.begin;
    }
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
