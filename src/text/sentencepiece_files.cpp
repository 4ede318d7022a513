// A SentencePiece model (DeBERTa-v3's spm.model, XLM-R's sentencepiece.bpe.model) converted as
// transformers' DebertaV2Converter and XLMRobertaConverter do, from the model's protobuf as they
// read it (its pieces, scores and types, the trainer's model type and unknown piece, the
// normalizer's charsmap), through our minimal copy of SentencePiece's proto and libprotobuf.
// SentencePiece's own library is not linked: Debian's libsentencepiece exports the protobuf-lite
// it bundles, and a process that also loads libprotobuf (TensorBoard's events) crashes in
// libprotobuf's static initializers (docs/tokenizers.md).
#include <algorithm>
#include <unordered_map>

#include "mpibert/core/base64.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/text/normalized_text.hpp"
#include "sentencepiece_model.pb.h"
#include "tokenizer_files.hpp"

namespace mpibert::tokenizer_parts {
namespace {

struct Piece {
  std::string piece;
  double score;
};

struct SentencePieceFile {
  std::string path;
  spm::ModelProto proto;
  int size() const { return proto.pieces_size(); }
  const std::string& piece(int id) const { return proto.pieces(id).piece(); }
};

void load(SentencePieceFile& file) {
  if (!file.proto.ParseFromString(read_file_bytes(file.path)))
    throw InputError(describe(file.path, "", "is not a SentencePiece model (its protobuf does not parse)"));
  if (file.size() < 3) throw InputError(describe(file.path, "", "is not a SentencePiece model (fewer than 3 pieces)"));
  for (int id = 0; id < file.size(); ++id) {
    const std::string where = "pieces[" + std::to_string(id) + "]";
    if (!file.proto.pieces(id).has_piece() || file.piece(id).empty())
      throw InputError(describe(file.path, where, "has no piece"));
    require_utf8(file.piece(id), file.path, where);
  }
}

// The converter's vocab: the model's pieces, or XLM-R's fairseq layout (<s> <pad> </s> <unk>, the
// pieces after SentencePiece's first three, <mask>).
std::vector<Piece> converted_vocab(const SentencePieceFile& file, TokenizerClass tokenizer_class) {
  std::vector<Piece> vocab;
  const int size = file.size();
  const bool fairseq = tokenizer_class == TokenizerClass::kXlmRoberta;
  if (fairseq) vocab = {{"<s>", 0.0}, {"<pad>", 0.0}, {"</s>", 0.0}, {"<unk>", 0.0}};
  for (int id = fairseq ? 3 : 0; id < size; ++id) vocab.push_back({file.piece(id), file.proto.pieces(id).score()});
  if (fairseq) vocab.push_back({"<mask>", 0.0});
  return vocab;
}

// transformers' generate_merges with vocab_scores: for each piece, each split of it into two
// pieces of the model, ordered by the halves' ids; then all by (score, left length, right
// length), highest first, ties in that order.
nlohmann::json generate_merges(const SentencePieceFile& file, const std::vector<Piece>& vocab_scores) {
  std::unordered_map<std::string, int> ids;
  for (int id = 0; id < file.size(); ++id) ids[file.piece(id)] = id;
  std::unordered_map<std::string, double> scores;
  std::vector<std::string> order;
  for (const Piece& piece : vocab_scores)
    if (scores.emplace(piece.piece, piece.score).second)
      order.push_back(piece.piece);
    else
      scores[piece.piece] = piece.score;  // a dict keeps the first position and the last value
  struct Merge {
    std::string left, right;
    double score;
    size_t left_length, right_length;
  };
  std::vector<Merge> merges;
  for (const std::string& piece : order) {
    const std::u32string chars = to_code_points(piece);
    std::vector<Merge> local;
    for (size_t index = 1; index < chars.size(); ++index) {
      std::string left = to_utf8(chars.substr(0, index)), right = to_utf8(chars.substr(index));
      if (ids.count(left) && ids.count(right)) local.push_back({left, right, scores[piece], index, chars.size() - index});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::make_pair(ids[a.left], ids[a.right]) < std::make_pair(ids[b.left], ids[b.right]);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::make_tuple(a.score, a.left_length, a.right_length) > std::make_tuple(b.score, b.left_length, b.right_length);
  });
  nlohmann::json list = nlohmann::json::array();
  for (const Merge& merge : merges) list.push_back({merge.left, merge.right});
  return list;
}

nlohmann::json model_of(const SentencePieceFile& file, const std::vector<Piece>& vocab, TokenizerClass tokenizer_class) {
  const spm::TrainerSpec& trainer = file.proto.trainer_spec();
  if (trainer.model_type() == spm::TrainerSpec::UNIGRAM) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const Piece& piece : vocab) pieces.push_back({piece.piece, piece.score});
    const int unk_id = tokenizer_class == TokenizerClass::kXlmRoberta ? 3 : trainer.unk_id();
    return {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", std::move(pieces)}, {"byte_fallback", false}};
  }
  if (trainer.model_type() == spm::TrainerSpec::BPE) {
    nlohmann::json ids = nlohmann::json::object();
    for (size_t i = 0; i < vocab.size(); ++i) ids[vocab[i].piece] = i;
    require_utf8(trainer.unk_piece(), file.path, "trainer_spec.unk_piece");
    return {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", trainer.unk_piece()},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", std::move(ids)},
            {"merges", generate_merges(file, vocab)}};
  }
  throw InputError(describe(file.path, "trainer_spec.model_type " + std::to_string(trainer.model_type()),
                            "transformers converts Unigram (1) and BPE (2) SentencePiece models only"));
}

// SpmConverter's added tokens: control pieces (special) and user-defined ones, not normalized.
nlohmann::json added_tokens_of(const SentencePieceFile& file, const std::vector<Piece>& vocab) {
  std::unordered_map<std::string, size_t> ids;
  for (size_t i = 0; i < vocab.size(); ++i) ids[vocab[i].piece] = i;
  nlohmann::json added = nlohmann::json::array();
  for (const auto& piece : file.proto.pieces()) {
    const bool control = piece.type() == spm::ModelProto::SentencePiece::CONTROL;
    if (!control && piece.type() != spm::ModelProto::SentencePiece::USER_DEFINED) continue;
    const auto id = ids.find(piece.piece());
    if (id == ids.end()) continue;
    added.push_back({{"id", id->second},
                     {"content", piece.piece()},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", control}});
  }
  return added;
}

nlohmann::json normalizer_of(const SentencePieceFile& file, TokenizerClass tokenizer_class, const nlohmann::json& config) {
  const std::string& charsmap = file.proto.normalizer_spec().precompiled_charsmap();
  nlohmann::json list = nlohmann::json::array();
  auto precompiled = [&] {
    if (!charsmap.empty()) list.push_back({{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(charsmap)}});
  };
  if (tokenizer_class == TokenizerClass::kDebertaV2) {
    if (config.value("do_lower_case", false)) list.push_back({{"type", "Lowercase"}});
    list.push_back({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}});
    precompiled();
    list.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}});
  } else {
    precompiled();
    list.push_back({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}});
    list.push_back({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", "\u2581"}});
  }
  return {{"type", "Sequence"}, {"normalizers", std::move(list)}};
}

// DebertaV2Converter's and XLMRobertaConverter's Metaspace: their slow classes have neither
// add_prefix_space nor legacy, so SpmConverter's defaults hold whatever tokenizer_config.json says.
nlohmann::json pre_tokenizer_of(TokenizerClass tokenizer_class, const nlohmann::json& config) {
  const nlohmann::json metaspace = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  if (tokenizer_class != TokenizerClass::kDebertaV2) return metaspace;
  nlohmann::json list = nlohmann::json::array();
  if (config.value("split_by_punct", false)) list.push_back({{"type", "Punctuation"}, {"behavior", "Isolated"}});
  list.push_back(metaspace);
  return {{"type", "Sequence"}, {"pretokenizers", std::move(list)}};
}

nlohmann::json post_processor_of(const std::vector<Piece>& vocab, TokenizerClass tokenizer_class, const std::string& path) {
  std::map<std::string, int32_t> ids;
  auto id_of = [&](const std::string& name) {
    for (size_t i = vocab.size(); i-- > 0;)
      if (vocab[i].piece == name) return ids[name] = static_cast<int32_t>(i);
    throw InputError(describe(path, "", "has no " + name + " piece"));
  };
  if (tokenizer_class == TokenizerClass::kDebertaV2) {
    id_of("[CLS]");
    id_of("[SEP]");
    return template_processing({{"[CLS]", 0}, {"$A", 0}, {"[SEP]", 0}},
                               {{"[CLS]", 0}, {"$A", 0}, {"[SEP]", 0}, {"$B", 1}, {"[SEP]", 1}}, ids);
  }
  id_of("<s>");
  id_of("</s>");
  return template_processing({{"<s>", 0}, {"$A", 0}, {"</s>", 0}},
                             {{"<s>", 0}, {"$A", 0}, {"</s>", 0}, {"</s>", 0}, {"$B", 0}, {"</s>", 0}}, ids);
}

}  // namespace

nlohmann::json convert_sentencepiece(const std::string& model_file, TokenizerClass tokenizer_class,
                                     const nlohmann::json& config) {
  SentencePieceFile file;
  file.path = model_file;
  load(file);
  const std::vector<Piece> vocab = converted_vocab(file, tokenizer_class);
  nlohmann::json t;
  t["model"] = model_of(file, vocab, tokenizer_class);
  t["added_tokens"] = added_tokens_of(file, vocab);
  t["normalizer"] = normalizer_of(file, tokenizer_class, config);
  t["pre_tokenizer"] = pre_tokenizer_of(tokenizer_class, config);
  t["post_processor"] = post_processor_of(vocab, tokenizer_class, model_file);
  return t;
}

}  // namespace mpibert::tokenizer_parts
