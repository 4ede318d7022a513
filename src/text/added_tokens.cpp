#include "added_tokens.hpp"

#include "mpibert/text/unicode.hpp"

namespace mpibert::tokenizer_parts {
namespace {

// Rust regex's \w, as AddedVocabulary's single_word test uses it (starts_with_word, ends_with_word).
bool is_word_char(char32_t c) { return unicode::is_regex_word(c); }

}  // namespace

void AddedTokens::Trie::insert(const std::u32string& pattern, int token) {
  if (pattern.empty()) return;
  size_t node = 0;
  for (char32_t c : pattern) {
    auto it = nodes[node].children.find(c);
    if (it == nodes[node].children.end()) {
      nodes.emplace_back();
      it = nodes[node].children.emplace(c, nodes.size() - 1).first;
    }
    node = it->second;
  }
  nodes[node].token = token;
}

const AddedToken* AddedTokens::with_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens[it->second];
}

const AddedToken* AddedTokens::with_content(const std::string& content) const {
  const auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens[it->second];
}

void AddedTokens::prepare(const Normalizer* normalizer) {
  raw_ = Trie{};
  normalized_ = Trie{};
  by_id_.clear();
  by_content_.clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    by_id_[tokens[i].id] = i;
    by_content_[tokens[i].content] = i;
    NormalizedText pattern(to_code_points(tokens[i].content));
    if (tokens[i].normalized && normalizer) normalizer->normalize(pattern);
    (tokens[i].normalized ? normalized_ : raw_).insert(pattern.text(), static_cast<int>(i));
  }
}

std::vector<Split> AddedTokens::extract(const NormalizedText& text, bool normalized_ones) const {
  const Trie& trie = normalized_ones ? normalized_ : raw_;
  const std::u32string& s = text.text();
  std::vector<Split> splits;
  if (trie.nodes[0].children.empty()) {
    splits.push_back({text, std::nullopt});
    return splits;
  }
  size_t start_offset = 0, i = 0;
  while (i < s.size()) {
    // The longest token starting here.
    size_t node = 0, end = 0;
    int found = -1;
    for (size_t j = i; j < s.size(); ++j) {
      const auto it = trie.nodes[node].children.find(s[j]);
      if (it == trie.nodes[node].children.end()) break;
      node = it->second;
      if (trie.nodes[node].token >= 0) {
        found = trie.nodes[node].token;
        end = j + 1;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    const AddedToken& token = tokens[static_cast<size_t>(found)];
    size_t start = i, stop = end;
    i = end;
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char(s[start - 1]);
      const bool space_after = stop == s.size() || !is_word_char(s[stop]);
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      size_t leftmost = start;
      while (leftmost > 0 && unicode::is_rust_whitespace(s[leftmost - 1])) --leftmost;
      start = std::max(leftmost, start_offset);
    }
    if (token.rstrip)
      while (stop < s.size() && unicode::is_rust_whitespace(s[stop])) ++stop;
    if (start_offset < start) splits.push_back({text.slice(start_offset, start), std::nullopt});
    NormalizedText piece = text.slice(start, stop);
    splits.push_back({piece, std::vector<Token>{{token.id, to_utf8(piece.text()), 0, piece.size()}}});
    start_offset = stop;
    i = std::max(i, stop);
  }
  if (start_offset != s.size()) splits.push_back({text.slice(start_offset, s.size()), std::nullopt});
  return splits;
}

}  // namespace mpibert::tokenizer_parts
