#include "mpibert/data/features.hpp"

#include <algorithm>

#include "mpibert/core/error.hpp"
#include "mpibert/core/utf8.hpp"

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

// Token labels of one window, HF run_qa.py prepare_train_features: the first answer must lie
// wholly inside the window, else both labels point at [CLS]. HF's forward scan for the start can
// run past the window's last token into [SEP]/padding when the answer starts at that last token
// (its comment calls it an edge case); here the scan stops at the window's end, so the label is
// that last token, which is what the rule above asks for.
std::pair<int, int> window_labels(const Encoding& context, int64_t window_begin, int64_t window_end, int64_t start_char,
                                  int64_t end_char) {
  const auto& offsets = context.offsets;
  if (window_begin == window_end) return {-1, -1};
  if (!(offsets[window_begin].begin <= start_char && offsets[window_end - 1].end >= end_char)) return {-1, -1};
  int64_t start = window_begin;
  while (start < window_end && offsets[start].begin <= start_char) ++start;
  int64_t end = window_end - 1;
  while (end >= window_begin && offsets[end].end >= end_char) --end;
  return {static_cast<int>(start - 1 - window_begin), static_cast<int>(end + 1 - window_begin)};
}

}  // namespace

FeatureTable make_features(const SquadDataset& data, int64_t first_example, int64_t num_examples,
                           const WordPieceTokenizer& tokenizer, const FeatureParams& params) {
  validate(params);
  const Vocab& vocab = tokenizer.vocab();
  const auto cls = static_cast<uint16_t>(vocab.cls_id()), sep = static_cast<uint16_t>(vocab.sep_id());

  FeatureTable table;
  int32_t cached_context = -1;
  Encoding context;
  for (int64_t e = first_example; e < first_example + num_examples; ++e) {
    const Example& example = data.examples[static_cast<size_t>(e)];
    const std::string record = "question id " + example.id;
    if (example.context_index != cached_context) {  // questions of a paragraph are consecutive
      cached_context = example.context_index;
      context = tokenizer.encode(data.contexts[static_cast<size_t>(cached_context)]);
    }
    Encoding question = tokenizer.encode(utf8::lstrip(example.question));
    if (params.max_query_length > 0 && question.size() > static_cast<size_t>(params.max_query_length)) {
      question.ids.resize(static_cast<size_t>(params.max_query_length));
      question.offsets.resize(question.ids.size());
    }
    const int64_t window = params.max_seq_length - static_cast<int64_t>(question.size()) - 3;
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
    const auto context_start = static_cast<uint16_t>(question.size() + 2);
    size_t window_index = 0;
    for (size_t begin = 0;; begin += static_cast<size_t>(window - params.doc_stride), ++window_index) {
      const size_t end = std::min(begin + static_cast<size_t>(window), context.size());

      table.input_ids.push_back(cls);
      table.input_ids.insert(table.input_ids.end(), question.ids.begin(), question.ids.end());
      table.input_ids.push_back(sep);
      table.input_ids.insert(table.input_ids.end(), context.ids.begin() + static_cast<long>(begin),
                             context.ids.begin() + static_cast<long>(end));
      table.input_ids.push_back(sep);
      table.offsets.insert(table.offsets.end(), 2 * (question.size() + 2), -1);
      for (size_t t = begin; t < end; ++t) {
        table.offsets.push_back(context.offsets[t].begin);
        table.offsets.push_back(context.offsets[t].end);
      }
      table.offsets.insert(table.offsets.end(), {-1, -1});

      auto [start, stop] =
          start_char < 0 ? std::pair<int, int>{-1, -1}
                         : window_labels(context, static_cast<int64_t>(begin), static_cast<int64_t>(end), start_char, end_char);
      const bool inside = start >= 0;
      table.start_positions.push_back(inside ? static_cast<uint16_t>(context_start + start) : 0);
      table.end_positions.push_back(inside ? static_cast<uint16_t>(context_start + stop) : 0);
      table.lengths.push_back(static_cast<uint16_t>(question.size() + 3 + (end - begin)));
      table.context_starts.push_back(context_start);
      table.example_indices.push_back(e);
      table.window_indices.push_back(static_cast<uint16_t>(std::min<size_t>(window_index, 65535)));
      if (end == context.size()) break;  // this window reached the end of the context
    }
  }
  return table;
}

}  // namespace mpibert
