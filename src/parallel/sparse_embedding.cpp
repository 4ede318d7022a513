#include "sparse_embedding.hpp"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "cast_collectives.hpp"

namespace mpibert {

SparseEmbedding::SparseEmbedding(torch::Tensor embedding, Communicator& communicator, int ranks, double max_fraction,
                                 torch::ScalarType wire)
    : embedding_(std::move(embedding)), communicator_(communicator), ranks_(ranks), max_fraction_(max_fraction), wire_(wire) {}

void SparseEmbedding::note_input_ids(const torch::Tensor& input_ids) {
  torch::NoGradGuard no_grad;
  if (!touched_.defined()) touched_ = torch::zeros({embedding_.size(0)}, embedding_.options().requires_grad(false));
  touched_.index_fill_(0, input_ids.reshape({-1}).to(embedding_.device(), torch::kLong), 1.0);
}

// Issued before any bucket on every rank, it is done long before the embedding's gradient is. On a
// backend whose collectives run on a device stream (NCCL), the summed mask comes to pinned host
// memory on a side stream, behind its all-reduce, so that finding the union's rows waits only for
// that copy, which the GPU reaches early in backward (the compute stream does not wait for it),
// where nonzero() on the device would make the host wait for every backward kernel queued before
// it and leave the GPU idle after.
std::optional<IssuedReduction> SparseEmbedding::start_exchange() {
  if (!touched_.defined()) return std::nullopt;
  touched_reduction_ = communicator_.all_reduce_sum(touched_, "all-reduce of the word embedding rows touched");
  if (communicator_.capabilities().device_streams) {
    const torch::Device device = touched_.device();
    const c10::impl::VirtualGuardImpl device_guard(device.type());
    const c10::Stream side = device_guard.getStreamFromGlobalPool(device);
    const c10::StreamGuard on_side(side);
    touched_reduction_->wait();  // orders the current (side) stream after the all-reduce
    touched_on_host_.emplace(touched_);
  }
  return IssuedReduction{touched_reduction_, static_cast<int64_t>(touched_.nbytes())};
}

// The rows of the union, ascending, on the embedding's device.
torch::Tensor SparseEmbedding::touched_rows() {
  if (!touched_on_host_) {
    touched_reduction_->wait();
    return touched_.nonzero().flatten();  // on the CPU, or MPI with GPUs: the host waits for it here
  }
  torch::Tensor rows = host_to_device(touched_on_host_->get().nonzero().flatten(), touched_.device());
  touched_on_host_.reset();
  return rows;
}

// Every rank finds the same union (the mask sums whole numbers exactly) and so takes the same branch.
std::optional<IssuedReduction> SparseEmbedding::reduce_touched_rows(const std::string& what) {
  if (!touched_reduction_) return std::nullopt;
  torch::Tensor rows = touched_rows();
  touched_ = torch::Tensor();
  touched_reduction_.reset();
  if (static_cast<double>(rows.numel()) > max_fraction_ * static_cast<double>(embedding_.size(0))) {
    ++dense_fallbacks_;
    return std::nullopt;
  }
  rows_ = rows;
  values_ = embedding_.grad().index_select(0, rows).div_(ranks_);
  auto work = all_reduce_sum_as(wire_, communicator_, values_,
                                "all-reduce of " + std::to_string(rows.numel()) + " touched rows of " + what);
  ++exchanges_;
  rows_exchanged_ += rows.numel();
  return IssuedReduction{work, wire_bytes(wire_, values_)};
}

// Rows outside the union are zero on every rank, so the dense average there is zero too.
void SparseEmbedding::copy_rows_back() {
  if (!rows_.defined()) return;
  torch::NoGradGuard no_grad;
  embedding_.grad().index_copy_(0, rows_, values_);
  rows_ = values_ = torch::Tensor();
}

}  // namespace mpibert
