// Internal: collectives whose data crosses the network in a narrower dtype than the tensors it
// comes from and lands in (data_parallel.hpp's CommDtype). The source is cast into a buffer of
// the wire dtype when the collective is issued; the result is widened into the destination when
// the returned Work is first waited for (on a GPU on the caller's stream, after the collective).
// With the tensors' own dtype these are the communicator's plain collectives.
#pragma once

#include <memory>
#include <string>

#include "mpibert/comm/communicator.hpp"

namespace mpibert {

std::shared_ptr<Work> all_reduce_sum_as(torch::ScalarType wire, Communicator& communicator, const torch::Tensor& tensor,
                                        const std::string& what);
std::shared_ptr<Work> reduce_scatter_sum_as(torch::ScalarType wire, Communicator& communicator, const torch::Tensor& input,
                                            const torch::Tensor& output, const std::string& what);
// Not in place: `input` must not be a view of `output`.
std::shared_ptr<Work> all_gather_as(torch::ScalarType wire, Communicator& communicator, const torch::Tensor& input,
                                    const torch::Tensor& output, const std::string& what);

// The bytes `tensor` takes on the wire.
int64_t wire_bytes(torch::ScalarType wire, const torch::Tensor& tensor);

}  // namespace mpibert
