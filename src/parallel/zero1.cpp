// zero1 (ZeRO stage 1): each bucket is reduce-scattered, each rank keeps the AdamW state of its
// 1/N slice of every bucket only, updates that slice, and the parameters are all-gathered back.
// The same arithmetic as ddp, with 1/N of the optimizer memory.
#include "grouped_parallel.hpp"

namespace mpibert {
namespace {

class Zero1 final : public ShardedParallel {
 public:
  Zero1(const ModelDescription& model, std::shared_ptr<Communicator> communicator, const AdamWOptions& adam,
        const DataParallelOptions& options)
      : ShardedParallel(model, std::move(communicator), options, /*releases_gradients=*/false) {
    build_sharded_buckets(adam);
    log_layout("zero1", "gradient buckets", "");
  }

 protected:
  void after_step() override { all_gather_updated_parameters(); }
};

}  // namespace

std::unique_ptr<DataParallel> make_zero1(const ModelDescription& model, std::shared_ptr<Communicator> communicator,
                                         const AdamWOptions& adam, const DataParallelOptions& options) {
  return std::make_unique<Zero1>(model, std::move(communicator), adam, options);
}

}  // namespace mpibert
