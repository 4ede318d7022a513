// zero2 (ZeRO stage 2): as zero1, and a bucket's full-size gradient buffer exists only from its
// first gradient of the step (allocated by a hook before autograd accumulates into it) to the end
// of its reduce-scatter: between steps a rank holds only its 1/N gradient slices.
#include <optional>

#include "grouped_parallel.hpp"

namespace mpibert {
namespace {

class Zero2 final : public ShardedParallel {
 public:
  Zero2(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
        const DataParallelOptions& options)
      : ShardedParallel(model, std::move(communicator), options, /*releases_gradients=*/true) {
    groups_ = group_into_buckets(parameters_, options.first_bucket_mb, options.bucket_mb, std::nullopt);
    attach_gradient_views();
    build_shards(adam, /*own_shard_storage=*/false);
    install_hooks(/*allocate_before_accumulation=*/true);
    release_gradient_buffers();
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
