// Internal: a model directory's tokenizer files as transformers' AutoTokenizer.from_pretrained
// reads them. Where there is no tokenizer.json, the slow tokenizer's files are converted as
// convert_slow_tokenizer does (BertConverter, RobertaConverter, DebertaV2Converter,
// XLMRobertaConverter); then tokenizer_config.json is applied as the fast tokenizer classes apply
// it: the class's own settings (do_lower_case, add_prefix_space, trim_offsets) over the
// components', and its added and special tokens.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "added_tokens.hpp"

namespace mpibert::tokenizer_parts {

// The tokenizer classes whose slow files mpibert converts (tokenizer_config.json's
// tokenizer_class, "Fast" or not).
enum class TokenizerClass { kBert, kRoberta, kDebertaV2, kXlmRoberta, kOther };

struct TokenizerFiles {
  nlohmann::json tokenizer;                          // tokenizer.json's content, or what the converter makes
  std::string origin;                                // the tokenizer.json, or "DIR (vocab.json + merges.txt)", for messages
  nlohmann::json config = nlohmann::json::object();  // tokenizer_config.json, with special_tokens_map.json's tokens
  TokenizerClass tokenizer_class = TokenizerClass::kOther;
  std::string class_name;  // the class transformers' AutoTokenizer takes, "" where it finds none
  nlohmann::json legacy_added_tokens = nlohmann::json::object();  // added_tokens.json, where transformers reads it
};

// A token read from a text or protobuf file (vocab.txt, merges.txt, a SentencePiece piece) is
// UTF-8, as the JSON the converters make must be; otherwise an InputError names the file and where.
void require_utf8(const std::string& token, const std::string& file, const std::string& where);

// The files of model directory `dir`. An InputError names the directory when it has none that
// mpibert reads, and the file when one cannot be read.
TokenizerFiles read_tokenizer_files(const std::string& dir);

// The tokenizer_config.json that a copy of the tokenizer read from `source` (a model directory, a
// lone tokenizer.json or a vocab.txt) needs so that it reloads, in mpibert and in transformers, to
// exactly that tokenizer wherever it is copied: a run directory has a config.json of its own, whose
// model_type would otherwise choose the class. The source's own config with the class it was read
// as (null where it names its class already, or is WordPiece files read by their files); for a lone tokenizer.json,
// PreTrainedTokenizerFast with the pre-tokenizer's own add_prefix_space (the class's default would change it) and the special
// tokens it already has.
nlohmann::json config_for_copy(const std::string& source);

// tokenizer.json changed as the class's fast tokenizer changes its backend on loading.
void apply_class_settings(nlohmann::json& tokenizer, const TokenizerFiles& files);
// The added tokens transformers adds on loading: added_tokens_decoder's, then the special tokens
// (bos, eos, unk, sep, pad, cls, mask, additional) not added yet. Ids are resolved by the caller.
struct ConfigTokens {
  std::vector<AddedToken> decoder;  // added or updated (by content)
  std::vector<AddedToken> special;  // added where no added token has their content
};
ConfigTokens config_added_tokens(const TokenizerFiles& files);

// The converters, each from the directory's files and its tokenizer_config.json.
nlohmann::json convert_wordpiece(const std::string& vocab_txt, const nlohmann::json& config);
nlohmann::json convert_byte_level_bpe(const std::string& vocab_json, const std::string& merges_txt, const nlohmann::json& config);
nlohmann::json convert_sentencepiece(const std::string& model_file, TokenizerClass tokenizer_class, const nlohmann::json& config);

// A TemplateProcessing post-processor: each part a special token's name or $A / $B, with its type
// id; `ids` the special tokens' ids.
using TemplateParts = std::vector<std::pair<std::string, int>>;
nlohmann::json template_processing(const TemplateParts& single, const TemplateParts& pair,
                                   const std::map<std::string, int32_t>& ids);

// A special token's name in tokenizer_config.json (a string, or an AddedToken object), or `otherwise`.
std::string config_token(const nlohmann::json& config, const char* key, const std::string& otherwise);

}  // namespace mpibert::tokenizer_parts
