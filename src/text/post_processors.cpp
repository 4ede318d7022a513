// The post-processors of tokenizer.json (HF tokenizers' processors/): the special tokens and type
// ids around one sequence and two, and what they do to each sequence's offsets (byte-level BPE's
// trimming of the spaces a token starts or ends with).
#include <limits>
#include <map>

#include "mpibert/text/unicode.hpp"
#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {
namespace {

// BertProcessing's and RobertaProcessing's [token, id].
SpecialToken special_of(const nlohmann::json& json, const Where& where) {
  if (!json.is_array() || json.size() != 2) refuse(where, "must be [token, id]");
  return {token_id(json[1], where.at(1)), string_value(json[0], where.at(0)), 0};
}

// A type id as the templates hold it (int32; tokenizers reads a u32).
constexpr int64_t kMaxTypeId = std::numeric_limits<int32_t>::max();

// Leading and trailing spaces of a byte-level token ('Ġ', U+0120, is the space byte) not counted
// in its offsets, as HF's process_offsets.
void trim_offsets(TokenizedText& sequence, bool add_prefix_space) {
  for (size_t i = 0; i < sequence.size(); ++i) {
    const std::u32string token = to_code_points(sequence.tokens[i]);
    auto is_space = [](char32_t c) { return c == 0x120 || unicode::is_rust_whitespace(c); };
    size_t leading = 0, trailing = 0;
    while (leading < token.size() && is_space(token[leading])) ++leading;
    while (trailing < token.size() && is_space(token[token.size() - 1 - trailing])) ++trailing;
    Span& offsets = sequence.offsets[i];
    if (leading > 0) {
      const bool is_first = i == 0 || offsets.begin == 0;
      if (is_first && add_prefix_space && leading == 1) leading = 0;
      offsets.begin = std::min(offsets.begin + static_cast<int32_t>(leading), offsets.end);
    }
    if (trailing > 0 && offsets.end >= static_cast<int32_t>(trailing))
      offsets.end = std::max(offsets.end - static_cast<int32_t>(trailing), offsets.begin);
  }
}

// The [CLS] and [SEP] of BertProcessing and RobertaProcessing, with where the file gives their ids.
class ClsSepProcessing : public PostProcessor {
 public:
  ClsSepProcessing(const nlohmann::json& json, const Where& where)
      : cls_(special_of(field(json, where, "cls"), where.at("cls"))),
        sep_(special_of(field(json, where, "sep"), where.at("sep"))),
        ids_{{cls_.id, where.at("cls").at(1)}, {sep_.id, where.at("sep").at(1)}} {}
  std::vector<SpecialId> special_ids() const override { return ids_; }

 protected:
  SpecialToken cls_, sep_;

 private:
  std::vector<SpecialId> ids_;
};

class BertProcessing final : public ClsSepProcessing {
 public:
  using ClsSepProcessing::ClsSepProcessing;
  SequenceTemplate single() const override { return {{cls_}, {}, {sep_}, 0, 0}; }
  SequenceTemplate pair() const override {
    SpecialToken last = sep_;
    last.type_id = 1;
    return {{cls_}, {sep_}, {last}, 0, 1};
  }
};

class RobertaProcessing final : public ClsSepProcessing {
 public:
  RobertaProcessing(const nlohmann::json& json, const Where& where)
      : ClsSepProcessing(json, where),
        trim_(bool_field(json, where, "trim_offsets", true)),
        add_prefix_space_(bool_field(json, where, "add_prefix_space", true)) {}
  void process_sequence(TokenizedText& sequence) const override {
    if (trim_) trim_offsets(sequence, add_prefix_space_);
  }
  SequenceTemplate single() const override { return {{cls_}, {}, {sep_}, 0, 0}; }
  SequenceTemplate pair() const override { return {{cls_}, {sep_, sep_}, {sep_}, 0, 0}; }

 private:
  bool trim_, add_prefix_space_;
};

class ByteLevelProcessing final : public PostProcessor {
 public:
  ByteLevelProcessing(bool trim, bool add_prefix_space) : trim_(trim), add_prefix_space_(add_prefix_space) {}
  void process_sequence(TokenizedText& sequence) const override {
    if (trim_) trim_offsets(sequence, add_prefix_space_);
  }

 private:
  bool trim_, add_prefix_space_;
};

class TemplateProcessing final : public PostProcessor {
 public:
  TemplateProcessing(const nlohmann::json& json, const Where& where) {
    read_special_tokens(field(json, where, "special_tokens"), where.at("special_tokens"));
    single_ = read(field(json, where, "single"), where.at("single"), false);
    pair_ = read(field(json, where, "pair"), where.at("pair"), true);
  }
  SequenceTemplate single() const override { return single_; }
  SequenceTemplate pair() const override { return pair_; }
  std::vector<SpecialId> special_ids() const override { return ids_; }

 private:
  // {name: {"id": name, "ids": [...], "tokens": [...]}}: each special's tokens in turn.
  void read_special_tokens(const nlohmann::json& specials, const Where& where) {
    if (!specials.is_object()) refuse(where, "must be an object");
    for (const auto& [name, special] : specials.items()) {
      const Where at = where.at(name);
      const nlohmann::json& ids = field(special, at, "ids");
      const nlohmann::json& tokens = field(special, at, "tokens");
      if (!ids.is_array() || !tokens.is_array() || ids.size() != tokens.size())
        refuse(at, "ids and tokens must be lists of one length");
      std::vector<SpecialToken>& list = specials_[name];
      for (size_t k = 0; k < ids.size(); ++k) {
        list.push_back({token_id(ids[k], at.at("ids").at(k)), string_value(tokens[k], at.at("tokens").at(k)), 0});
        ids_.push_back({list.back().id, at.at("ids").at(k)});
      }
    }
  }

  // The pieces in order: special tokens before the first sequence, between the two, after the
  // last (each special's ids in turn), and each sequence's type id.
  SequenceTemplate read(const nlohmann::json& pieces, const Where& where, bool is_pair) const {
    if (!pieces.is_array()) refuse(where, "must be a list of pieces");
    SequenceTemplate out;
    int sequences_seen = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const nlohmann::json& piece = pieces[i];
      const Where at = where.at(i);
      if (piece.contains("Sequence")) {
        const nlohmann::json& sequence = piece["Sequence"];
        const std::string id = string_field(sequence, at.at("Sequence"), "id");
        const auto type_id = static_cast<int32_t>(integer_field(sequence, at.at("Sequence"), "type_id", 0, 0, kMaxTypeId));
        if (id != (sequences_seen == 0 ? "A" : "B")) refuse(at, "sequences must come in the order A, B (this one is " + id + ")");
        (sequences_seen == 0 ? out.first_type : out.second_type) = type_id;
        ++sequences_seen;
      } else if (piece.contains("SpecialToken")) {
        const nlohmann::json& special = piece["SpecialToken"];
        const std::string name = string_field(special, at.at("SpecialToken"), "id");
        const auto type_id = static_cast<int32_t>(integer_field(special, at.at("SpecialToken"), "type_id", 0, 0, kMaxTypeId));
        const auto it = specials_.find(name);
        if (it == specials_.end()) refuse(at, "special token " + name + " is not in special_tokens");
        auto& list = sequences_seen == 0 ? out.before : sequences_seen == 1 && is_pair ? out.between : out.after;
        for (SpecialToken token : it->second) {
          token.type_id = type_id;
          list.push_back(std::move(token));
        }
      } else {
        refuse(at, "a piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (sequences_seen != (is_pair ? 2 : 1)) refuse(where, std::string("must hold ") + (is_pair ? "A and B" : "A"));
    return out;
  }

  std::map<std::string, std::vector<SpecialToken>> specials_;
  std::vector<SpecialId> ids_;
  SequenceTemplate single_, pair_;
};

class ProcessorSequence final : public PostProcessor {
 public:
  explicit ProcessorSequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process_sequence(TokenizedText& sequence) const override {
    for (const auto& part : parts_) part->process_sequence(sequence);
  }
  // The last processor that adds special tokens decides them (HF's Sequence applies each in turn;
  // those of today's tokenizers pair ByteLevel's trimming with one template).
  SequenceTemplate single() const override {
    SequenceTemplate out;
    for (const auto& part : parts_)
      if (const SequenceTemplate t = part->single(); !t.before.empty() || !t.after.empty()) out = t;
    return out;
  }
  SequenceTemplate pair() const override {
    SequenceTemplate out;
    for (const auto& part : parts_)
      if (const SequenceTemplate t = part->pair(); !t.before.empty() || !t.between.empty() || !t.after.empty()) out = t;
    return out;
  }
  std::vector<SpecialId> special_ids() const override {
    std::vector<SpecialId> ids;
    for (const auto& part : parts_)
      for (SpecialId& id : part->special_ids()) ids.push_back(std::move(id));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& json, const Where& where, const Model& model) {
  const std::string type = string_field(json, where, "type");
  if (type == "BertProcessing") return std::make_unique<BertProcessing>(json, where);
  if (type == "RobertaProcessing") return std::make_unique<RobertaProcessing>(json, where);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelProcessing>(bool_field(json, where, "trim_offsets", true),
                                                 bool_field(json, where, "add_prefix_space", true));
  if (type == "TemplateProcessing") return std::make_unique<TemplateProcessing>(json, where);
  if (type == "Sequence") {
    const nlohmann::json& list = field(json, where, "processors");
    if (!list.is_array()) refuse(where.at("processors"), "must be a list");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_post_processor(list[i], where.at("processors").at(i), model));
    return std::make_unique<ProcessorSequence>(std::move(parts));
  }
  refuse(where,
         "post-processor type \"" + type +
             "\" is not one mpibert implements (BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel, Sequence)");
}

size_t special_id_bound(const PostProcessor& processor) {
  size_t bound = 0;
  for (const SpecialId& special : processor.special_ids()) bound = std::max(bound, static_cast<size_t>(special.id) + 1);
  return bound;
}

}  // namespace mpibert::tokenizer_parts
