// Any tokenizer the Hub ships, as HF's fast tokenizers run it: the pipeline of tokenizer.json
// (added tokens, normalizer, pre-tokenizer, model, post-processor) composed from its components,
// giving the ids, tokens and offsets HF's fast tokenizer gives, offsets in code points of the
// original text through every normalization. A model directory without tokenizer.json is read as
// transformers converts it: vocab.txt (+ tokenizer_config.json) as BertTokenizerFast, vocab.json +
// merges.txt as RobertaTokenizerFast, a SentencePiece model (spm.model, sentencepiece.bpe.model)
// as DebertaV2Converter / XLMRobertaConverter. A component it does not implement is refused by
// name (the file, the JSON path, the type), never approximated.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpibert/text/tokenized_text.hpp"

namespace mpibert {

namespace tokenizer_parts {
class Normalizer;
class PreTokenizer;
class Model;
class PostProcessor;
struct AddedToken;
struct AddedTokens;
}  // namespace tokenizer_parts

// The names of the files a model directory's tokenizer is made of, beside its weights.
const std::vector<std::string>& tokenizer_file_names();

class HfTokenizer {
 public:
  // A model directory as AutoTokenizer.from_pretrained reads it (its tokenizer.json, else its
  // slow tokenizer's files, with its tokenizer_config.json), a tokenizer.json as
  // Tokenizer.from_file reads it, or any other file as a WordPiece vocab.txt of an uncased BERT
  // (BertTokenizerFast(vocab_file)'s defaults). Bad files are an InputError naming the file and,
  // in tokenizer.json, the JSON path.
  static HfTokenizer load(const std::string& path);
  // tokenizer.json's content; `origin` names it in messages.
  static HfTokenizer from_json(const nlohmann::json& json, const std::string& origin);

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer();

  // The tokens of `text` (UTF-8) without special tokens, as tokenizer(text, add_special_tokens=False,
  // return_offsets_mapping=True). Invalid UTF-8 is an InputError naming its byte.
  // Without `with_tokens`, `tokens` stays empty (features need ids and offsets only).
  TokenizedText encode(std::string_view text, bool with_tokens = true) const;
  const SequenceTemplate& single() const { return single_; }
  const SequenceTemplate& pair() const { return pair_; }

  std::optional<int32_t> token_to_id(const std::string& token) const;
  std::string id_to_token(int32_t id) const;
  size_t vocab_size() const;  // the largest id it can give + 1: the model's, the added and the special tokens'
  // The padding token's id (tokenizer_config.json's pad_token, the padding settings, or the
  // usual names), and whether padding goes on the left (features put the context first then).
  int32_t pad_id() const { return pad_id_; }
  bool pads_left() const { return pads_left_; }
  // "WordPiece", "BPE", "Unigram", "WordLevel" and where it came from.
  const std::string& description() const { return description_; }
  // The SHA-256 of what decides its ids and offsets (its components and added tokens as finally
  // applied, not how the files spell them), which shards record.
  const std::string& digest() const { return digest_; }

 private:
  HfTokenizer();
  friend struct TokenizerReader;
  int32_t guess_pad_id() const;
  void add_token(const tokenizer_parts::AddedToken& token, bool update);

  std::unique_ptr<tokenizer_parts::AddedTokens> added_;
  std::unique_ptr<tokenizer_parts::Normalizer> normalizer_;
  std::unique_ptr<tokenizer_parts::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tokenizer_parts::Model> model_;
  std::unique_ptr<tokenizer_parts::PostProcessor> post_processor_;
  SequenceTemplate single_, pair_;
  int32_t pad_id_ = 0;
  size_t special_bound_ = 0;  // the post-processor's special ids, the largest + 1
  bool pads_left_ = false;
  std::string description_, digest_;
};

// Writes the files of the tokenizer HfTokenizer::load(path) reads into `dir` (created), as a
// model directory holds them, so that HfTokenizer::load(dir) and transformers' AutoTokenizer load
// exactly that tokenizer from there, beside whatever config.json the directory has: a directory's
// tokenizer files, a tokenizer.json or a vocab.txt, with a tokenizer_config.json naming the class
// each was read as (and, for a lone tokenizer.json, its pre-tokenizer's add_prefix_space).
void save_tokenizer_files(const std::string& path, const std::string& dir);

}  // namespace mpibert
