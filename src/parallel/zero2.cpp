// zero2 (ZeRO stage 2): as zero1, and a bucket's full-size gradient buffer exists only from its
// first gradient of the step (allocated by a hook before autograd accumulates into it) to the end
// of its reduce-scatter: between steps a rank holds only its 1/N gradient slices.
#include "grouped_parallel.hpp"

namespace mpibert {
namespace {

class Zero2 final : public ShardedParallel {
 public:
  Zero2(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
        const DataParallelOptions& options)
      : ShardedParallel(model, std::move(communicator), options, /*releases_gradients=*/true) {
    build_sharded_buckets(adam);
    log_layout("zero2", "gradient buckets", "");
  }

 protected:
  void after_step() override { all_gather_updated_parameters(); }
};

}  // namespace

std::unique_ptr<DataParallel> make_zero2(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                         const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Zero2>(model, std::move(communicator), adam, options);
}

}  // namespace mpibert
