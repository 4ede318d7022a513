// A text's tokens as a tokenizer gives them (ids, tokens, offsets in the original text), and the
// special tokens a post-processor puts around one sequence or two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpibert/text/normalized_text.hpp"

namespace mpibert {

// One sequence's tokens: ids, their strings, [begin, end) code points of the original text.
struct TokenizedText {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
  std::vector<Span> offsets;
  size_t size() const { return ids.size(); }
};

// The special tokens a post-processor puts around one sequence or two, and the type ids: for two,
// [before] first [between] second [after]; for one, [before] first [after] (between, second_type
// unused).
struct SpecialToken {
  int32_t id;
  std::string token;
  int32_t type_id;
};
struct SequenceTemplate {
  std::vector<SpecialToken> before, between, after;
  int32_t first_type = 0, second_type = 0;
};

}  // namespace mpibert
