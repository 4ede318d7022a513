#include "mpibert/data/batching.hpp"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

namespace mpibert {

const char* padding_name(Padding padding) {
  switch (padding) {
    case Padding::kDynamic: return "dynamic";
    case Padding::kFull: return "full";
    case Padding::kPacked: return "packed";
  }
  return "?";
}

namespace {

// The tokenizer's context type id (BERT's 1, RoBERTa's 0) from the context on, the specials after
// it included (HF's pair template), 0 before.
int64_t token_type(const FeatureView& feature, int32_t t, int64_t context_type) {
  return t >= feature.context_start ? context_type : 0;
}

void add_answer_and_counts(Batch& batch, const FeatureView& feature, int64_t row) {
  batch.start_positions[row] = feature.start_position;
  batch.end_positions[row] = feature.end_position;
  batch.real_tokens += feature.length;
  batch.real_token_pairs += static_cast<int64_t>(feature.length) * feature.length;
}

void make_padded(Batch& batch, const FeatureStore& store, Padding padding, int64_t pad_token_id,
                 const torch::TensorOptions& options) {
  const auto rows = static_cast<int64_t>(batch.feature_indices.size());
  const int64_t max_seq_length = store.manifest().params.max_seq_length;
  int64_t longest = 0;
  for (int64_t index : batch.feature_indices) longest = std::max<int64_t>(longest, store.feature(index).length);
  batch.padded_length = padding == Padding::kFull ? max_seq_length : std::min(max_seq_length, (longest + 7) / 8 * 8);
  batch.input_ids = torch::full({rows, batch.padded_length}, pad_token_id, options);
  batch.token_type_ids = torch::zeros({rows, batch.padded_length}, options);
  batch.attention_mask = torch::zeros({rows, batch.padded_length}, options);
  auto ids = batch.input_ids.accessor<int64_t, 2>();
  auto types = batch.token_type_ids.accessor<int64_t, 2>();
  auto mask = batch.attention_mask.accessor<int64_t, 2>();
  const int64_t context_type = store.manifest().context_type_id;
  for (int64_t row = 0; row < rows; ++row) {
    const FeatureView feature = store.feature(batch.feature_indices[static_cast<size_t>(row)]);
    for (int32_t t = 0; t < feature.length; ++t) {
      ids[row][t] = feature.input_ids[t];
      types[row][t] = token_type(feature, t, context_type);
      mask[row][t] = 1;
    }
    add_answer_and_counts(batch, feature, row);
  }
}

// `buckets`: where the batch falls in one, the tokens padded to it by a filler feature.
void make_packed(Batch& batch, const FeatureStore& store, const torch::TensorOptions& options, int64_t pad_token_id,
                 const TokenBuckets* buckets) {
  batch.feature_offsets = {0};
  for (int64_t index : batch.feature_indices) {
    const int64_t length = store.feature(index).length;
    batch.feature_offsets.push_back(batch.feature_offsets.back() + length);
    batch.padded_length = std::max(batch.padded_length, length);
  }
  const int64_t real = batch.feature_offsets.back();
  const auto features = static_cast<int64_t>(batch.feature_indices.size());
  batch.bucket = buckets ? buckets->bucket_of(features, real) : 0;
  if (batch.bucket > 0) {
    batch.feature_offsets.push_back(batch.bucket);
    batch.padded_length = buckets->logits_width();
    batch.start_positions = torch::empty({features + 1}, options);
    batch.end_positions = torch::empty({features + 1}, options);
  }
  const int64_t tokens = batch.feature_offsets.back();
  batch.input_ids = torch::empty({tokens}, options);
  batch.token_type_ids = torch::empty({tokens}, options);
  batch.position_ids = torch::empty({tokens}, options);
  int64_t* ids = batch.input_ids.data_ptr<int64_t>();
  int64_t* types = batch.token_type_ids.data_ptr<int64_t>();
  int64_t* positions = batch.position_ids.data_ptr<int64_t>();
  const int64_t context_type = store.manifest().context_type_id;
  for (size_t row = 0; row < batch.feature_indices.size(); ++row) {
    const FeatureView feature = store.feature(batch.feature_indices[row]);
    const int64_t offset = batch.feature_offsets[row];
    for (int32_t t = 0; t < feature.length; ++t) {
      ids[offset + t] = feature.input_ids[t];
      types[offset + t] = token_type(feature, t, context_type);
      positions[offset + t] = t;
    }
    add_answer_and_counts(batch, feature, static_cast<int64_t>(row));
  }
  batch.cumulative_lengths = torch::empty({static_cast<int64_t>(batch.feature_offsets.size())}, options.dtype(torch::kInt32));
  std::copy(batch.feature_offsets.begin(), batch.feature_offsets.end(), batch.cumulative_lengths.data_ptr<int32_t>());
  if (batch.bucket == 0) return;
  // The filler: pad tokens counting from 0 below the position limit (a position the model has no
  // embedding for reads out of bounds on the GPU), its answer past the logits (the loss's ignored index).
  for (int64_t t = real; t < tokens; ++t) {
    ids[t] = pad_token_id;
    types[t] = 0;
    positions[t] = (t - real) % buckets->position_limit;
  }
  batch.start_positions[features] = batch.padded_length;
  batch.end_positions[features] = batch.padded_length;
}

}  // namespace

int64_t TokenBuckets::bucket_of(int64_t features, int64_t real_tokens) const {
  if (features != batch_size || granularity <= 0) return 0;
  return (real_tokens / granularity + 1) * granularity;  // the filler has at least one token
}

std::vector<int64_t> TokenBuckets::all() const {
  std::vector<int64_t> buckets;
  for (int64_t bucket = granularity; bucket <= bucket_of(batch_size, batch_size * max_seq_length); bucket += granularity)
    buckets.push_back(bucket);
  return buckets;
}

Batch make_batch(const FeatureStore& store, const std::vector<int64_t>& feature_indices, Padding padding, bool pin_memory,
                 const TokenBuckets* buckets) {
  const int64_t pad_token_id = store.manifest().pad_id;
  Batch batch;
  batch.feature_indices = feature_indices;
  const auto options = torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin_memory);
  const auto rows = static_cast<int64_t>(feature_indices.size());
  batch.start_positions = torch::empty({rows}, options);
  batch.end_positions = torch::empty({rows}, options);
  if (padding == Padding::kPacked)
    make_packed(batch, store, options, pad_token_id, buckets);
  else
    make_padded(batch, store, padding, pad_token_id, options);
  return batch;
}

Batch Batch::to(const torch::Device& device) const {
  if (device.is_cpu()) return *this;
  Batch moved = *this;
  for (torch::Tensor* tensor : {&moved.input_ids, &moved.token_type_ids, &moved.attention_mask, &moved.position_ids,
                                &moved.start_positions, &moved.end_positions, &moved.cumulative_lengths})
    if (tensor->defined()) *tensor = tensor->to(device, /*non_blocking=*/true);
  return moved;
}

BatchLoader::BatchLoader(const FeatureStore& store, std::vector<int64_t> order, int64_t batch_size, int64_t first,
                         Padding padding, torch::Device device, std::optional<TokenBuckets> buckets)
    : store_(store),
      order_(std::move(order)),
      batch_size_(batch_size),
      next_(first),
      count_((static_cast<int64_t>(order_.size()) + batch_size - 1) / batch_size),
      padding_(padding),
      device_(device),
      buckets_(std::move(buckets)) {
  if (!exhausted()) start(next_);
}

BatchLoader::~BatchLoader() {
  if (pending_.valid()) pending_.wait();
}

void BatchLoader::start(int64_t micro_batch) {
  const auto first = order_.begin() + micro_batch * batch_size_;
  std::vector<int64_t> indices(first, first + std::min<int64_t>(batch_size_,
                                                                static_cast<int64_t>(order_.size()) - micro_batch * batch_size_));
  const bool pin = device_.is_cuda();
  pending_ = std::async(std::launch::async, [this, indices = std::move(indices), pin] {
    // Pinned memory belongs to the thread's current CUDA device: this rank's, not device 0 (where
    // every rank of the node would otherwise open a context).
    c10::OptionalDeviceGuard guard(pin ? std::optional<c10::Device>(device_) : std::nullopt);
    return make_batch(store_, indices, padding_, pin, buckets_ ? &*buckets_ : nullptr);
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
