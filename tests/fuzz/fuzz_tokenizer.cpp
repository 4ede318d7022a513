// The tokenizer on arbitrary bytes with bert-base-uncased's vocabulary: invalid UTF-8 is an
// InputError; valid text gives ids in the vocabulary and offsets inside the text, in order.
#include <utf8proc.h>

#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/text/tokenizer.hpp"

namespace {
const mpibert::WordPieceTokenizer& tokenizer() {
  static const mpibert::WordPieceTokenizer instance(mpibert::Vocab::load(MPIBERT_FUZZ_VOCAB));
  return instance;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = mpibert::fuzz::as_text(data, size);
  try {
    const mpibert::Encoding encoding = tokenizer().encode(text);
    const auto code_points = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                                static_cast<utf8proc_ssize_t>(text.size()), nullptr, 0, UTF8PROC_STABLE);
    int32_t previous_end = 0;
    for (size_t i = 0; i < encoding.size(); ++i) {
      const auto& span = encoding.offsets[i];
      if (encoding.ids[i] < 0 || static_cast<size_t>(encoding.ids[i]) >= tokenizer().vocab().size()) __builtin_trap();
      if (span.begin < previous_end || span.end < span.begin || (code_points >= 0 && span.end > code_points)) __builtin_trap();
      previous_end = span.begin;
    }
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
