#include "mpibert/batching.hpp"

#include <algorithm>

namespace mpibert {

Batch make_batch(const FeatureStore& store, const std::vector<int64_t>& feature_indices, Padding padding,
                 int64_t pad_token_id) {
  Batch batch;
  batch.feature_indices = feature_indices;
  const auto rows = static_cast<int64_t>(feature_indices.size());
  const int64_t max_seq_length = store.manifest().params.max_seq_length;
  int64_t longest = 0;
  for (int64_t index : feature_indices) longest = std::max<int64_t>(longest, store.feature(index).length);
  batch.padded_length = padding == Padding::kFull ? max_seq_length : std::min(max_seq_length, (longest + 7) / 8 * 8);

  const auto options = torch::TensorOptions().dtype(torch::kLong);
  batch.input_ids = torch::full({rows, batch.padded_length}, pad_token_id, options);
  batch.token_type_ids = torch::zeros({rows, batch.padded_length}, options);
  batch.attention_mask = torch::zeros({rows, batch.padded_length}, options);
  batch.start_positions = torch::empty({rows}, options);
  batch.end_positions = torch::empty({rows}, options);
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto types = batch.token_type_ids.accessor<int64_t, 2>();
  auto mask = batch.attention_mask.accessor<int64_t, 2>();
  auto starts = batch.start_positions.accessor<int64_t, 1>();
  auto ends = batch.end_positions.accessor<int64_t, 1>();
  for (int64_t row = 0; row < rows; ++row) {
    const FeatureView feature = store.feature(feature_indices[static_cast<size_t>(row)]);
    for (int32_t t = 0; t < feature.length; ++t) {
      ids[row][t] = feature.input_ids[t];
      types[row][t] = t >= feature.context_start ? 1 : 0;  // context and the final [SEP]
      mask[row][t] = 1;
    }
    starts[row] = feature.start_position;
    ends[row] = feature.end_position;
    batch.real_tokens += feature.length;
  }
  return batch;
}

}  // namespace mpibert
