// The models of tokenizer.json (HF tokenizers' models/): WordPiece, BPE, Unigram and WordLevel,
// each tokenizing one pre-tokenized word into tokens with offsets in its characters.
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {
namespace {

using TokenIds = std::unordered_map<std::string, int32_t>;

// {token: id} of tokenizer.json, and the reverse.
TokenIds read_vocab(const nlohmann::json& json, const Where& where, std::vector<std::string>& by_id) {
  const nlohmann::json& vocab = field(json, where, "vocab");
  if (!vocab.is_object()) refuse(where.at("vocab"), "must be an object {token: id}");
  TokenIds ids;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
      refuse(where.at("vocab"), "\"" + token + "\": the id must be a whole number from 0 to " + std::to_string(kMaxTokenId));
    const auto value = static_cast<int32_t>(id.get<int64_t>());
    ids[token] = value;
    if (by_id.size() <= static_cast<size_t>(value)) by_id.resize(static_cast<size_t>(value) + 1);
    by_id[static_cast<size_t>(value)] = token;
  }
  return ids;
}

size_t utf8_length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

std::optional<int32_t> find(const TokenIds& vocab, const std::string& token) {
  const auto it = vocab.find(token);
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> name_of(const std::vector<std::string>& by_id, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= by_id.size()) return std::nullopt;
  return by_id[static_cast<size_t>(id)];
}

std::optional<std::string> optional_string(const nlohmann::json& json, const Where& where, const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) refuse(where.at(key), "must be a string or null");
  return it->get<std::string>();
}

class WordPiece final : public Model {
 public:
  WordPiece(const nlohmann::json& json, const Where& where) {
    vocab_ = read_vocab(json, where, by_id_);
    unk_ = string_field(json, where, "unk_token");
    prefix_ = string_field(json, where, "continuing_subword_prefix", "##");
    max_chars_ =
        static_cast<size_t>(integer_field(json, where, "max_input_chars_per_word", 100, 0, std::numeric_limits<int32_t>::max()));
    unk_id_ = find(vocab_, unk_);
    if (!unk_id_) refuse(where.at("unk_token"), "\"" + unk_ + "\" is not in the vocab");
  }
  // Greedy longest match first, the continuation with the prefix; a word that does not split, or
  // is too long, is one unknown token.
  std::vector<Token> tokenize(const std::u32string& word) const override {
    if (word.size() > max_chars_) return {{*unk_id_, unk_, 0, word.size()}};
    // The word in UTF-8 once, with where each character starts; candidates are its byte ranges.
    const std::string bytes = to_utf8(word);
    std::vector<size_t> at(word.size() + 1, bytes.size());
    for (size_t i = 0, b = 0; i < word.size(); ++i) {
      at[i] = b;
      b += utf8_length(word[i]);
    }
    std::vector<Token> tokens;
    std::string piece;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      std::optional<int32_t> id;
      for (; start < end; --end) {
        piece.assign(start > 0 ? prefix_ : std::string());
        piece.append(bytes, at[start], at[end] - at[start]);
        if ((id = find(vocab_, piece))) break;
      }
      if (!id) return {{*unk_id_, unk_, 0, word.size()}};
      tokens.push_back({*id, piece, start, end});
      start = end;
    }
    return tokens;
  }
  std::optional<int32_t> token_to_id(const std::string& token) const override { return find(vocab_, token); }
  std::optional<std::string> id_to_token(int32_t id) const override { return name_of(by_id_, id); }
  size_t vocab_size() const override { return by_id_.size(); }
  size_t token_count() const override { return vocab_.size(); }
  std::string kind() const override { return "WordPiece"; }

 private:
  TokenIds vocab_;
  std::vector<std::string> by_id_;
  std::string unk_, prefix_;
  size_t max_chars_ = 100;
  std::optional<int32_t> unk_id_;
};

class WordLevel final : public Model {
 public:
  WordLevel(const nlohmann::json& json, const Where& where) {
    vocab_ = read_vocab(json, where, by_id_);
    unk_ = string_field(json, where, "unk_token");
  }
  std::vector<Token> tokenize(const std::u32string& word) const override {
    const std::string text = to_utf8(word);
    if (const auto id = find(vocab_, text)) return {{*id, text, 0, word.size()}};
    const auto unk = find(vocab_, unk_);
    if (!unk) throw InputError("WordLevel: \"" + text + "\" is not in the vocab and the unk_token " + unk_ + " is not either");
    return {{*unk, unk_, 0, word.size()}};
  }
  std::optional<int32_t> token_to_id(const std::string& token) const override { return find(vocab_, token); }
  std::optional<std::string> id_to_token(int32_t id) const override { return name_of(by_id_, id); }
  size_t vocab_size() const override { return by_id_.size(); }
  size_t token_count() const override { return vocab_.size(); }
  std::string kind() const override { return "WordLevel"; }

 private:
  TokenIds vocab_;
  std::vector<std::string> by_id_;
  std::string unk_;
};

// BPE as HF's merge_word and Word::merge_all: the word's characters (with the continuation prefix
// and end-of-word suffix, byte fallback and unknown tokens as HF adds them), then merges applied
// lowest rank first (leftmost first among equal ranks) until none applies.
class Bpe final : public Model {
 public:
  Bpe(const nlohmann::json& json, const Where& where) {
    vocab_ = read_vocab(json, where, by_id_);
    unk_ = optional_string(json, where, "unk_token");
    prefix_ = optional_string(json, where, "continuing_subword_prefix");
    suffix_ = optional_string(json, where, "end_of_word_suffix");
    fuse_unk_ = bool_field(json, where, "fuse_unk", false);
    byte_fallback_ = bool_field(json, where, "byte_fallback", false);
    ignore_merges_ = bool_field(json, where, "ignore_merges", false);
    const auto dropout = json.find("dropout");
    if (dropout != json.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
      refuse(where.at("dropout"), "BPE dropout is for training; mpibert tokenizes deterministically (dropout null)");
    const nlohmann::json& merges = field(json, where, "merges");
    if (!merges.is_array()) refuse(where.at("merges"), "must be a list");
    const size_t prefix_len = prefix_ ? prefix_->size() : 0;
    for (size_t i = 0; i < merges.size(); ++i) {
      std::string a, b;
      const nlohmann::json& merge = merges[i];
      if (merge.is_string()) {
        const std::string line = merge.get<std::string>();
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
          refuse(where.at("merges").at(i), "\"" + line + "\" is not two tokens separated by one space");
        a = line.substr(0, space);
        b = line.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        a = merge[0].get<std::string>();
        b = merge[1].get<std::string>();
      } else {
        refuse(where.at("merges").at(i), "must be \"A B\" or [\"A\", \"B\"]");
      }
      const auto a_id = find(vocab_, a), b_id = find(vocab_, b);
      if (!a_id || !b_id) refuse(where.at("merges").at(i), "\"" + (!a_id ? a : b) + "\" is not in the vocab");
      const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
      const auto merged_id = find(vocab_, merged);
      if (!merged_id) refuse(where.at("merges").at(i), "the merged token \"" + merged + "\" is not in the vocab");
      merges_[pair_key(*a_id, *b_id)] = {static_cast<uint32_t>(i), *merged_id};
    }
  }

  std::vector<Token> tokenize(const std::u32string& word) const override {
    if (word.empty()) return {};
    const std::string text = to_utf8(word);
    if (ignore_merges_)
      if (const auto id = find(vocab_, text)) return {{*id, text, 0, word.size()}};
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (const auto hit = cache_.find(text); hit != cache_.end()) return hit->second;
    }
    std::vector<Token> tokens = merge_word(word);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (word.size() < 256 && cache_.size() < 10000) cache_.emplace(text, tokens);
    return tokens;
  }
  std::optional<int32_t> token_to_id(const std::string& token) const override { return find(vocab_, token); }
  std::optional<std::string> id_to_token(int32_t id) const override { return name_of(by_id_, id); }
  size_t vocab_size() const override { return by_id_.size(); }
  size_t token_count() const override { return vocab_.size(); }
  std::string kind() const override { return "BPE"; }

 private:
  struct Symbol {
    int32_t id;
    size_t begin, end;
    long prev, next;
    bool alive = true;
  };
  struct Candidate {
    uint32_t rank;
    size_t pos;
    int32_t merged;
    bool operator<(const Candidate& other) const {  // the priority queue's top: lowest rank, then leftmost
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
  }

  void add(std::vector<Symbol>& symbols, int32_t id, size_t begin, size_t end) const {
    const long index = static_cast<long>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, begin, end, index - 1, -1, true});
  }

  std::vector<Token> merge_word(const std::u32string& word) const {
    std::vector<Symbol> symbols;
    std::optional<std::pair<int32_t, std::pair<size_t, size_t>>> unk;  // id, span
    auto flush_unk = [&] {
      if (unk) add(symbols, unk->first, unk->second.first, unk->second.second);
      unk.reset();
    };
    for (size_t i = 0; i < word.size(); ++i) {
      std::string piece = to_utf8(word.substr(i, 1));
      if (i > 0 && prefix_) piece = *prefix_ + piece;
      if (i + 1 == word.size() && suffix_) piece += *suffix_;
      if (const auto id = find(vocab_, piece)) {
        flush_unk();
        add(symbols, *id, i, i + 1);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (unsigned char byte : piece) {
          char code[8];
          std::snprintf(code, sizeof code, "<0x%02X>", byte);
          const auto id = find(vocab_, code);
          if (!id) break;
          bytes.push_back(*id);
        }
        if (bytes.size() == piece.size()) {
          for (int32_t id : bytes) add(symbols, id, i, i + 1);
          continue;
        }
      }
      if (!unk_) continue;
      const auto unk_id = find(vocab_, *unk_);
      if (!unk_id) throw InputError("BPE: the unk_token " + *unk_ + " is not in the vocab");
      if (unk && fuse_unk_) {
        unk->second.second = i + 1;
      } else {
        flush_unk();
        unk = {*unk_id, {i, i + 1}};
      }
    }
    flush_unk();
    merge_all(symbols);
    std::vector<Token> tokens;
    for (const Symbol& s : symbols)
      if (s.alive) tokens.push_back({s.id, by_id_.at(static_cast<size_t>(s.id)), s.begin, s.end});
    return tokens;
  }

  std::optional<std::pair<uint32_t, int32_t>> merge_of(int32_t a, int32_t b) const {
    const auto it = merges_.find(pair_key(a, b));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  }

  void merge_all(std::vector<Symbol>& symbols) const {
    std::priority_queue<Candidate> queue;
    for (size_t i = 0; i + 1 < symbols.size(); ++i)
      if (const auto m = merge_of(symbols[i].id, symbols[i + 1].id)) queue.push({m->first, i, m->second});
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& current = symbols[top.pos];
      if (!current.alive || current.next == -1) continue;
      const auto next_pos = static_cast<size_t>(current.next);
      const Symbol right = symbols[next_pos];
      const auto merge = merge_of(current.id, right.id);
      if (!merge || merge->second != top.merged) continue;
      current.id = top.merged;
      current.end = right.end;
      current.next = right.next;
      symbols[next_pos].alive = false;
      if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size())
        symbols[static_cast<size_t>(right.next)].prev = static_cast<long>(top.pos);
      if (current.prev >= 0)
        if (const auto m = merge_of(symbols[static_cast<size_t>(current.prev)].id, current.id))
          queue.push({m->first, static_cast<size_t>(current.prev), m->second});
      if (current.next > -1 && static_cast<size_t>(current.next) < symbols.size())
        if (const auto m = merge_of(current.id, symbols[static_cast<size_t>(current.next)].id))
          queue.push({m->first, top.pos, m->second});
    }
  }

  TokenIds vocab_;
  std::vector<std::string> by_id_;
  std::optional<std::string> unk_, prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // (a, b) -> (rank, merged id)
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<Token>> cache_;
};

// Unigram as HF's encode_optimized: the best path over the pieces' log-probabilities (a
// character no piece starts with costs the lowest score minus 10 as unknown), unknown runs fused.
class Unigram final : public Model {
 public:
  Unigram(const nlohmann::json& json, const Where& where) {
    const nlohmann::json& vocab = field(json, where, "vocab");
    if (!vocab.is_array()) refuse(where.at("vocab"), "must be a list of [piece, score]");
    if (vocab.size() > static_cast<size_t>(kMaxTokenId) + 1)
      refuse(where.at("vocab"), "has more pieces than ids go (" + std::to_string(kMaxTokenId + 1) + ")");
    for (size_t i = 0; i < vocab.size(); ++i) {
      const nlohmann::json& entry = vocab[i];
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
        refuse(where.at("vocab").at(i), "must be [piece, score]");
      const std::string piece = entry[0].get<std::string>();
      pieces_.push_back(piece);
      scores_.push_back(entry[1].get<double>());
      ids_[piece] = static_cast<int32_t>(i);
      min_score_ = std::min(min_score_, scores_.back());
      insert(to_code_points(piece), static_cast<int32_t>(i));
    }
    const auto unk = json.find("unk_id");
    if (unk != json.end() && !unk->is_null()) {
      if (!unk->is_number_integer() || unk->get<int64_t>() < 0 || unk->get<size_t>() >= pieces_.size())
        refuse(where.at("unk_id"), "must be the index of a piece");
      unk_id_ = static_cast<int32_t>(unk->get<int64_t>());
    }
    byte_fallback_ = bool_field(json, where, "byte_fallback", false);
  }

  std::vector<Token> tokenize(const std::u32string& word) const override {
    if (word.empty()) return {};
    struct Best {
      int32_t id = 0;
      double score = 0;
      long starts_at = -1;
    };
    std::vector<Best> best(word.size() + 1);
    const double unk_score = min_score_ - 10.0;
    for (size_t start = 0; start < word.size(); ++start) {
      const double so_far = best[start].score;
      bool single = false;
      size_t node = 0;  // the trie walked along the word from `start`: pieces by increasing length
      for (size_t end = start; end < word.size(); ++end) {
        const auto edge = trie_[node].children.find(word[end]);
        if (edge == trie_[node].children.end()) break;
        node = edge->second;
        if (trie_[node].id < 0) continue;
        Best& target = best[end + 1];
        const double candidate = scores_[static_cast<size_t>(trie_[node].id)] + so_far;
        if (target.starts_at < 0 || candidate > target.score) target = {trie_[node].id, candidate, static_cast<long>(start)};
        if (end == start) single = true;
      }
      if (!single) {
        if (!unk_id_)
          throw InputError("Unigram: \"" + to_utf8(word.substr(start, 1)) + "\" is no piece and the model has no unk_id");
        Best& target = best[start + 1];
        const double candidate = unk_score + so_far;
        if (target.starts_at < 0 || candidate > target.score) target = {*unk_id_, candidate, static_cast<long>(start)};
      }
    }
    std::vector<std::pair<size_t, size_t>> spans;
    std::vector<bool> unknown;
    for (size_t end = word.size(); end > 0;) {
      const Best& node = best[end];
      const auto start = static_cast<size_t>(node.starts_at);
      const bool is_unk = unk_id_ && node.id == *unk_id_;
      if (is_unk && !unknown.empty() && unknown.back())
        spans.back().first = start;  // fused with the unknown run after it
      else {
        spans.push_back({start, end});
        unknown.push_back(is_unk);
      }
      end = start;
    }
    std::reverse(spans.begin(), spans.end());
    std::vector<Token> tokens;
    for (const auto& [begin, end] : spans) {
      const std::string text = to_utf8(word.substr(begin, end - begin));
      const auto id = ids_.find(text);
      if (id != ids_.end()) {
        tokens.push_back({id->second, text, begin, end});
        continue;
      }
      if (byte_fallback_) {
        std::vector<Token> bytes;
        for (unsigned char byte : text) {
          char code[8];
          std::snprintf(code, sizeof code, "<0x%02X>", byte);
          const auto b = ids_.find(code);
          if (b == ids_.end()) break;
          bytes.push_back({b->second, code, begin, end});
        }
        if (bytes.size() == text.size()) {
          tokens.insert(tokens.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      tokens.push_back({*unk_id_, text, begin, end});
    }
    return tokens;
  }
  std::optional<int32_t> token_to_id(const std::string& token) const override {
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> id_to_token(int32_t id) const override { return name_of(pieces_, id); }
  size_t vocab_size() const override { return pieces_.size(); }
  size_t token_count() const override { return pieces_.size(); }
  std::string kind() const override { return "Unigram"; }

 private:
  struct Node {
    std::map<char32_t, size_t> children;
    int32_t id = -1;
  };
  void insert(const std::u32string& piece, int32_t id) {
    if (trie_.empty()) trie_.emplace_back();
    size_t node = 0;
    for (char32_t c : piece) {
      auto it = trie_[node].children.find(c);
      if (it == trie_[node].children.end()) {
        trie_.emplace_back();
        it = trie_[node].children.emplace(c, trie_.size() - 1).first;
      }
      node = it->second;
    }
    trie_[node].id = id;  // a repeated piece keeps its last id, as HF's token-to-id map does
  }

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<Node> trie_;
  double min_score_ = std::numeric_limits<double>::infinity();
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> make_model(const nlohmann::json& json, const Where& where) {
  const std::string type = json.is_object() && json.contains("type") ? string_field(json, where, "type") : "";
  if (type == "WordPiece") return std::make_unique<WordPiece>(json, where);
  if (type == "BPE") return std::make_unique<Bpe>(json, where);
  if (type == "Unigram") return std::make_unique<Unigram>(json, where);
  if (type == "WordLevel") return std::make_unique<WordLevel>(json, where);
  refuse(where, "model type \"" + type + "\" is not one mpibert implements (WordPiece, BPE, Unigram, WordLevel)");
}

}  // namespace mpibert::tokenizer_parts
