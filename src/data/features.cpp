#include "mpibert/data/features.hpp"

#include <algorithm>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"
#include "mpibert/text/unicode.hpp"

namespace mpibert {
namespace {

void validate(const FeatureParams& params) {
  if (params.max_seq_length < 4 || params.max_seq_length > 65535)
    throw InputError(describe("--max-seq-length", std::to_string(params.max_seq_length), "must be in [4, 65535]"));
  if (params.doc_stride < 0 || params.doc_stride >= params.max_seq_length)
    throw InputError(describe("--doc-stride", std::to_string(params.doc_stride), "must be in [0, max_seq_length)"));
  if (params.max_query_length < 0)
    throw InputError(describe("--max-query-length", std::to_string(params.max_query_length), "must be >= 0 (0: no limit)"));
}

// Whether the tokenizer trims byte-level offsets but keeps the one space a sequence's first token
// starts with (HF's process_offsets with trim_offsets and add_prefix_space). HF trims each
// overflowing window on its own, so every window's first token keeps it: `Ġthe` is (30,34) as a
// window's first token, (31,34) inside the context's own encoding. The tokenizer's own offsets of
// a lone space tell: only that trimming gives (0,0), the begin kept and the end trimmed back to it.
// (The text layer gives the context's offsets trimmed once; the window's first token is redone here.)
bool first_token_keeps_its_space(const HfTokenizer& tokenizer) {
  const TokenizedText space = tokenizer.encode(" ", false);
  return space.size() == 1 && space.offsets[0].begin == 0 && space.offsets[0].end == 0;
}

// The leading spaces process_offsets counts in a token ('Ġ', U+0120, is the space byte).
size_t leading_spaces(const std::u32string& token) {
  size_t n = 0;
  while (n < token.size() && (token[n] == 0x120 || unicode::is_rust_whitespace(token[n]))) ++n;
  return n;
}

// Context token `t`'s offsets as a window's first token. The context's trimming moved the begin of
// a token with one leading space past it (one character of the text, byte-level BPE having no
// normalizer that merges spaces), and a lone space's end back to that begin: as a first token the
// space is kept, and a lone space ends where it begins, at the space.
Span as_window_start(const TokenizedText& context, size_t t, bool keeps_space) {
  const Span trimmed = context.offsets[t];
  if (!keeps_space || t == 0 || trimmed.begin == 0) return trimmed;  // offsets from 0 were kept as a first token's
  std::u32string token;
  utf8::decode(context.tokens[t], token);
  if (leading_spaces(token) != 1) return trimmed;
  const bool lone_space = token.size() == 1 && trimmed.end == trimmed.begin;
  return {trimmed.begin - 1, lone_space ? trimmed.begin - 1 : trimmed.end};
}

// Token labels of one window, HF run_qa.py prepare_train_features: the first answer must lie
// wholly inside the window, else both labels point at [CLS]. HF's forward scan for the start can
// run past the window's last token into [SEP]/padding when the answer starts at that last token
// (its comment calls it an edge case); here the scan stops at the window's end, so the label is
// that last token, which is what the rule above asks for.
std::pair<int, int> window_labels(const std::vector<Span>& offsets, int64_t start_char, int64_t end_char) {
  const auto window_end = static_cast<int64_t>(offsets.size());
  if (window_end == 0) return {-1, -1};
  if (!(offsets.front().begin <= start_char && offsets.back().end >= end_char)) return {-1, -1};
  int64_t start = 0;
  while (start < window_end && offsets[start].begin <= start_char) ++start;
  int64_t end = window_end - 1;
  while (end >= 0 && offsets[end].end >= end_char) --end;
  return {static_cast<int>(start - 1), static_cast<int>(end + 1)};
}

// The special tokens of a pair, in order: before the question, between it and the context, after.
struct PairSpecials {
  std::vector<uint32_t> before, between, after;
  size_t size() const { return before.size() + between.size() + after.size(); }
};

std::vector<uint32_t> ids_of(const std::vector<SpecialToken>& tokens) {
  std::vector<uint32_t> ids;
  for (const SpecialToken& token : tokens) ids.push_back(static_cast<uint32_t>(token.id));
  return ids;
}

// One window: the specials, the question, context tokens [begin, end) at `offsets`, its labels.
void add_window(FeatureTable& table, const PairSpecials& specials, const TokenizedText& question, const TokenizedText& context,
                size_t begin, size_t end, const std::vector<Span>& offsets, std::pair<int, int> labels) {
  auto append = [&](const std::vector<uint32_t>& ids) { table.input_ids.insert(table.input_ids.end(), ids.begin(), ids.end()); };
  const size_t context_start = specials.before.size() + question.size() + specials.between.size();
  append(specials.before);
  for (int32_t id : question.ids) table.input_ids.push_back(static_cast<uint32_t>(id));
  append(specials.between);
  for (size_t t = begin; t < end; ++t) table.input_ids.push_back(static_cast<uint32_t>(context.ids[t]));
  append(specials.after);
  table.offsets.insert(table.offsets.end(), 2 * context_start, -1);
  for (const Span& span : offsets) {
    table.offsets.push_back(span.begin);
    table.offsets.push_back(span.end);
  }
  table.offsets.insert(table.offsets.end(), 2 * specials.after.size(), -1);
  const bool inside = labels.first >= 0;
  table.start_positions.push_back(inside ? static_cast<uint16_t>(context_start + labels.first) : 0);
  table.end_positions.push_back(inside ? static_cast<uint16_t>(context_start + labels.second) : 0);
  table.lengths.push_back(static_cast<uint16_t>(context_start + (end - begin) + specials.after.size()));
  table.context_starts.push_back(static_cast<uint16_t>(context_start));
}

}  // namespace

int32_t context_type_id(const HfTokenizer& tokenizer) {
  const SequenceTemplate& pair = tokenizer.pair();
  const std::string name = "tokenizer " + tokenizer.description();
  if (tokenizer.pads_left())
    throw InputError(describe(name, "padding_side left",
                              "run_qa puts the context first for such a tokenizer; mpibert builds question-first features only"));
  if (pair.before.empty())
    throw InputError(
        describe(name, "post_processor",
                 "its pair template begins with no special token, which run_qa labels an answer outside the window with"));
  bool fits = pair.first_type == 0;
  for (const SpecialToken& token : pair.before) fits = fits && token.type_id == 0;
  for (const SpecialToken& token : pair.between) fits = fits && token.type_id == 0;
  for (const SpecialToken& token : pair.after) fits = fits && token.type_id == pair.second_type;
  if (!fits)
    throw InputError(describe(name, "post_processor",
                              "its pair template's type ids are not 0 up to the context and one type from the context on"));
  return pair.second_type;
}

FeatureTable make_features(const SquadDataset& data, int64_t first_example, int64_t num_examples, const HfTokenizer& tokenizer,
                           const FeatureParams& params) {
  validate(params);
  context_type_id(tokenizer);
  const SequenceTemplate& pair = tokenizer.pair();
  const PairSpecials specials{ids_of(pair.before), ids_of(pair.between), ids_of(pair.after)};

  const bool keeps_space = first_token_keeps_its_space(tokenizer);
  FeatureTable table;
  int32_t cached_context = -1;
  TokenizedText context;
  for (int64_t e = first_example; e < first_example + num_examples; ++e) {
    const Example& example = data.examples[static_cast<size_t>(e)];
    const std::string record = "question id " + example.id;
    if (example.context_index != cached_context) {  // questions of a paragraph are consecutive
      cached_context = example.context_index;
      context = tokenizer.encode(data.contexts[static_cast<size_t>(cached_context)], keeps_space);
    }
    TokenizedText question = tokenizer.encode(utf8::lstrip(example.question), false);
    if (params.max_query_length > 0 && question.size() > static_cast<size_t>(params.max_query_length)) {
      question.ids.resize(static_cast<size_t>(params.max_query_length));
      question.offsets.resize(question.ids.size());
    }
    const int64_t window = params.max_seq_length - static_cast<int64_t>(question.size() + specials.size());
    if (window < 1)
      throw InputError(describe(data.path, record,
                                "question has " + std::to_string(question.size()) +
                                    " tokens, leaving no room for context in max_seq_length " +
                                    std::to_string(params.max_seq_length) + " (set --max-query-length to truncate questions)"));
    const bool needs_windows = static_cast<int64_t>(context.size()) > window;
    if (needs_windows && window <= params.doc_stride)
      throw InputError(describe(data.path, record,
                                "question has " + std::to_string(question.size()) + " tokens, leaving " + std::to_string(window) +
                                    " context tokens per window, not more than doc_stride " + std::to_string(params.doc_stride) +
                                    " (set --max-query-length or a smaller --doc-stride)"));

    int64_t start_char = -1, end_char = -1;
    if (!example.answers.empty()) {
      start_char = example.answers[0].start;
      end_char = start_char + static_cast<int64_t>(utf8::length(example.answers[0].text));
    }
    size_t window_index = 0;
    for (size_t begin = 0;; begin += static_cast<size_t>(window - params.doc_stride), ++window_index) {
      const size_t end = std::min(begin + static_cast<size_t>(window), context.size());
      std::vector<Span> offsets(context.offsets.begin() + static_cast<std::ptrdiff_t>(begin),
                                context.offsets.begin() + static_cast<std::ptrdiff_t>(end));
      if (!offsets.empty()) offsets.front() = as_window_start(context, begin, keeps_space);
      const auto labels = start_char < 0 ? std::pair<int, int>{-1, -1} : window_labels(offsets, start_char, end_char);
      add_window(table, specials, question, context, begin, end, offsets, labels);
      table.example_indices.push_back(e);
      table.window_indices.push_back(static_cast<uint16_t>(std::min<size_t>(window_index, 65535)));
      if (end == context.size()) break;  // this window reached the end of the context
    }
  }
  return table;
}

}  // namespace mpibert
