#include "mpibert/data/batching.hpp"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <optional>

namespace mpibert {

Batch make_batch(const FeatureStore& store, const std::vector<int64_t>& feature_indices, Padding padding,
                 int64_t pad_token_id, bool pin_memory) {
  Batch batch;
  batch.feature_indices = feature_indices;
  const auto rows = static_cast<int64_t>(feature_indices.size());
  const int64_t max_seq_length = store.manifest().params.max_seq_length;
  int64_t longest = 0;
  for (int64_t index : feature_indices) longest = std::max<int64_t>(longest, store.feature(index).length);
  batch.padded_length = padding == Padding::kFull ? max_seq_length : std::min(max_seq_length, (longest + 7) / 8 * 8);

  const auto options = torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin_memory);
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
    batch.real_token_pairs += static_cast<int64_t>(feature.length) * feature.length;
  }
  return batch;
}

Batch Batch::to(const torch::Device& device) const {
  if (device.is_cpu()) return *this;
  Batch moved = *this;
  for (torch::Tensor* tensor : {&moved.input_ids, &moved.token_type_ids, &moved.attention_mask, &moved.start_positions,
                                &moved.end_positions})
    *tensor = tensor->to(device, /*non_blocking=*/true);
  return moved;
}

BatchLoader::BatchLoader(const FeatureStore& store, std::vector<int64_t> order, int64_t batch_size, int64_t first,
                         Padding padding, torch::Device device)
    : store_(store),
      order_(std::move(order)),
      batch_size_(batch_size),
      next_(first),
      count_((static_cast<int64_t>(order_.size()) + batch_size - 1) / batch_size),
      padding_(padding),
      device_(device) {
  if (!exhausted()) start(next_);
}

BatchLoader::~BatchLoader() {
  if (pending_.valid()) pending_.wait();
}

void BatchLoader::start(int64_t micro_batch) {
  const auto first = order_.begin() + micro_batch * batch_size_;
  std::vector<int64_t> indices(first, first + std::min<int64_t>(batch_size_, static_cast<int64_t>(order_.size()) - micro_batch * batch_size_));
  const bool pin = device_.is_cuda();
  pending_ = std::async(std::launch::async, [this, indices = std::move(indices), pin] {
    // Pinned memory belongs to the thread's current CUDA device: this rank's, not device 0 (where
    // every rank of the node would otherwise open a context).
    c10::OptionalDeviceGuard guard(pin ? std::optional<c10::Device>(device_) : std::nullopt);
    return make_batch(store_, indices, padding_, 0, pin);
  });
}

Batch BatchLoader::next() {
  if (exhausted())
    throw std::logic_error("BatchLoader::next: all " + std::to_string(count_) + " micro-batches of the epoch were delivered");
  Batch batch = pending_.get();
  if (++next_ < count_) start(next_);
  return batch.to(device_);
}

}  // namespace mpibert
