// Internal: tokenizer.json's added tokens, extracted from a text before the model sees it, as HF's
// AddedVocabulary does: those not normalized from the original text, the others from the
// normalized pieces (their own content normalized the same way), leftmost-longest, with their
// single_word, lstrip and rstrip rules.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

struct AddedTokens {
  std::vector<AddedToken> tokens;

  // Builds the two tries (the normalized patterns through `normalizer`, which may be null).
  void prepare(const Normalizer* normalizer);
  // The splits of `text`: added tokens tokenized, the rest not; `normalized_ones` picks the trie.
  std::vector<Split> extract(const NormalizedText& text, bool normalized_ones) const;
  bool empty() const { return tokens.empty(); }
  // The token with that id or content, null when none (as of the last prepare()).
  const AddedToken* with_id(int32_t id) const;
  const AddedToken* with_content(const std::string& content) const;

 private:
  struct Trie {
    struct Node {
      std::map<char32_t, size_t> children;
      int token = -1;  // index into tokens
    };
    std::vector<Node> nodes{Node{}};
    void insert(const std::u32string& pattern, int token);
  };
  Trie raw_, normalized_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
};

}  // namespace mpibert::tokenizer_parts
