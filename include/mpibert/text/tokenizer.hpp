// BERT uncased WordPiece, identical to HuggingFace's BertTokenizerFast for bert-base-uncased:
//   clean text (drop NUL, U+FFFD and Cc/Cf control characters; whitespace -> space),
//   isolate CJK ideographs, lower-case, NFD and drop combining marks (Mn),
//   split on whitespace and punctuation (ASCII 33-47, 58-64, 91-96, 123-126 and Unicode P*),
//   greedy longest-match-first WordPiece with "##" continuations; a word longer than
//   max_input_chars_per_word (HF: 100, Google's reference: 200) becomes [UNK].
// Offsets are [begin, end) code-point offsets into the original text, as HF's offset_mapping:
// characters dropped by normalization extend the preceding kept character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mpibert {

class Vocab {
 public:
  // Reads one token per line. Throws InputError naming the file if it cannot be read, is not
  // UTF-8, lacks [PAD] [UNK] [CLS] [SEP], or has more entries than uint16 ids can hold.
  static Vocab load(const std::string& path);
  static Vocab from_tokens(std::vector<std::string> tokens, const std::string& origin = "<memory>");

  // Move-only: the id map holds views into tokens_.
  Vocab() = default;
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  // -1 if absent.
  int32_t find(std::string_view token) const;
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  size_t size() const { return tokens_.size(); }
  const std::string& origin() const { return origin_; }

  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }

 private:
  std::string origin_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string_view, int32_t> ids_;  // views into tokens_
  int32_t pad_id_ = -1, unk_id_ = -1, cls_id_ = -1, sep_id_ = -1;
};

struct TokenSpan {
  int32_t begin, end;  // code points into the original text
};

// Token ids and offsets of one text, without special tokens.
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<TokenSpan> offsets;
  size_t size() const { return ids.size(); }
};

class WordPieceTokenizer {
 public:
  static constexpr int kHuggingFaceMaxWordChars = 100;
  static constexpr int kGoogleMaxWordChars = 200;

  explicit WordPieceTokenizer(Vocab vocab, int max_input_chars_per_word = kHuggingFaceMaxWordChars);

  // Throws InputError on invalid UTF-8 (naming the byte offset).
  Encoding encode(std::string_view text) const;
  std::vector<std::string> tokens(const Encoding& encoding) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  Vocab vocab_;
  int max_input_chars_per_word_;
};

}  // namespace mpibert
