// The post-processors of tokenizer.json (HF tokenizers' processors/): the special tokens and type
// ids around one sequence and two, and what they do to each sequence's offsets (byte-level BPE's
// trimming of the spaces a token starts or ends with).
#include "mpibert/text/unicode.hpp"
#include "tokenizer_parts.hpp"

namespace mpibert::tokenizer_parts {
namespace {

SpecialToken special_of(const nlohmann::json& json, const Where& where, int32_t type_id) {
  if (!json.is_array() || json.size() != 2 || !json[0].is_string() || !json[1].is_number_integer())
    refuse(where, "must be [token, id]");
  return {json[1].get<int32_t>(), json[0].get<std::string>(), type_id};
}

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

class BertProcessing final : public PostProcessor {
 public:
  BertProcessing(SpecialToken cls, SpecialToken sep) : cls_(std::move(cls)), sep_(std::move(sep)) {}
  SequenceTemplate single() const override { return {{cls_}, {}, {sep_}, 0, 0}; }
  SequenceTemplate pair() const override {
    SpecialToken last = sep_;
    last.type_id = 1;
    return {{cls_}, {sep_}, {last}, 0, 1};
  }

 private:
  SpecialToken cls_, sep_;
};

class RobertaProcessing final : public PostProcessor {
 public:
  RobertaProcessing(SpecialToken cls, SpecialToken sep, bool trim, bool add_prefix_space)
      : cls_(std::move(cls)), sep_(std::move(sep)), trim_(trim), add_prefix_space_(add_prefix_space) {}
  void process_sequence(TokenizedText& sequence) const override {
    if (trim_) trim_offsets(sequence, add_prefix_space_);
  }
  SequenceTemplate single() const override { return {{cls_}, {}, {sep_}, 0, 0}; }
  SequenceTemplate pair() const override { return {{cls_}, {sep_, sep_}, {sep_}, 0, 0}; }

 private:
  SpecialToken cls_, sep_;
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
    const nlohmann::json& specials = field(json, where, "special_tokens");
    if (!specials.is_object()) refuse(where.at("special_tokens"), "must be an object");
    single_ = read(field(json, where, "single"), where.at("single"), specials, false);
    pair_ = read(field(json, where, "pair"), where.at("pair"), specials, true);
  }
  SequenceTemplate single() const override { return single_; }
  SequenceTemplate pair() const override { return pair_; }

 private:
  // The pieces in order: special tokens before the first sequence, between the two, after the
  // last (each special's ids in turn), and each sequence's type id.
  static SequenceTemplate read(const nlohmann::json& pieces, const Where& where, const nlohmann::json& specials, bool is_pair) {
    if (!pieces.is_array()) refuse(where, "must be a list of pieces");
    SequenceTemplate out;
    int sequences_seen = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const nlohmann::json& piece = pieces[i];
      const Where at = where.at(i);
      if (piece.contains("Sequence")) {
        const nlohmann::json& sequence = piece["Sequence"];
        const std::string id = string_field(sequence, at.at("Sequence"), "id");
        const auto type_id = sequence.value("type_id", 0);
        if (id != (sequences_seen == 0 ? "A" : "B")) refuse(at, "sequences must come in the order A, B (this one is " + id + ")");
        (sequences_seen == 0 ? out.first_type : out.second_type) = type_id;
        ++sequences_seen;
      } else if (piece.contains("SpecialToken")) {
        const nlohmann::json& special = piece["SpecialToken"];
        const std::string name = string_field(special, at.at("SpecialToken"), "id");
        const auto type_id = special.value("type_id", 0);
        const auto it = specials.find(name);
        if (it == specials.end()) refuse(at, "special token " + name + " is not in special_tokens");
        const nlohmann::json& ids = field(*it, where, "ids");
        const nlohmann::json& tokens = field(*it, where, "tokens");
        if (!ids.is_array() || !tokens.is_array() || ids.size() != tokens.size())
          refuse(at, name + ": ids and tokens must be lists of one length");
        auto& list = sequences_seen == 0 ? out.before : sequences_seen == 1 && is_pair ? out.between : out.after;
        for (size_t k = 0; k < ids.size(); ++k) list.push_back({ids[k].get<int32_t>(), tokens[k].get<std::string>(), type_id});
      } else {
        refuse(at, "a piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (sequences_seen != (is_pair ? 2 : 1)) refuse(where, std::string("must hold ") + (is_pair ? "A and B" : "A"));
    return out;
  }

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

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& json, const Where& where, const Model& model) {
  const std::string type = string_field(json, where, "type");
  if (type == "BertProcessing")
    return std::make_unique<BertProcessing>(special_of(field(json, where, "cls"), where.at("cls"), 0),
                                            special_of(field(json, where, "sep"), where.at("sep"), 0));
  if (type == "RobertaProcessing")
    return std::make_unique<RobertaProcessing>(special_of(field(json, where, "cls"), where.at("cls"), 0),
                                               special_of(field(json, where, "sep"), where.at("sep"), 0),
                                               bool_field(json, where, "trim_offsets", true),
                                               bool_field(json, where, "add_prefix_space", true));
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

}  // namespace mpibert::tokenizer_parts
