// Collective bandwidth of a Communicator backend, in the style of nccl-tests (all_reduce_perf):
//   mpirun -n N bench_allreduce [--backend mpi|nccl] [--op all_reduce|reduce_scatter|all_gather|all]
//          [--min-bytes 1K] [--max-bytes 256M] [--factor 2] [--warmup 5] [--iters 20] [--dtype float]
// For each size: `warmup` operations, then `iters` timed ones, each waited, back to back (NCCL:
// the device is synchronized once after them, as nccl-tests does); time = max over ranks of the
// mean per operation. Sizes are whole buffers as in nccl-tests: the all-reduce tensor, the
// reduce-scatter input, the all-gather output. busbw = algbw * 2(n-1)/n (all-reduce) or (n-1)/n
// (reduce-scatter, all-gather), comparable across rank counts. #wrong counts, over all ranks,
// the elements that differ from the expected result of one more operation on known values.
#include <CLI/CLI.hpp>
#include <torch/cuda.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "mpibert/comm/communicator.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/runtime/host_collectives.hpp"

namespace {

using mpibert::Communicator;

struct Result {
  int64_t count = 0;  // elements of the whole buffer
  double seconds = 0;
  int64_t wrong = 0;
};

// One operation on buffers of `count` elements in total (a multiple of the rank count).
class Benchmark {
 public:
  Benchmark(Communicator& comm, std::string op, torch::TensorOptions options)
      : comm_(comm), op_(std::move(op)), options_(options) {}

  Result run(int64_t count, int warmup, int iters) {
    allocate(count);
    for (int i = 0; i < warmup; ++i) issue()->wait();
    synchronize();
    comm_.barrier("benchmark start");
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) issue()->wait();
    synchronize();
    const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    Result result;
    result.count = count;
    result.seconds = mpibert::max_over_ranks(local);
    result.wrong = check();
    return result;
  }

  // Bus bandwidth factor of nccl-tests: what each rank's link carries relative to the buffer.
  double bus_factor() const {
    const double n = comm_.size();
    return op_ == "all_reduce" ? 2 * (n - 1) / n : (n - 1) / n;
  }

 private:
  void allocate(int64_t count) {
    const int64_t block = count / comm_.size();
    if (op_ == "all_reduce") {
      input_ = torch::ones({count}, options_);
    } else if (op_ == "reduce_scatter") {
      input_ = torch::ones({count}, options_);
      output_ = torch::empty({block}, options_);
    } else {
      output_ = torch::zeros({count}, options_);
      input_ = output_.narrow(0, block * comm_.rank(), block);  // in place, as the DDP layer does
    }
  }

  std::shared_ptr<mpibert::Work> issue() {
    if (op_ == "all_reduce") return comm_.all_reduce_sum(input_, "benchmark all-reduce");
    if (op_ == "reduce_scatter") return comm_.reduce_scatter_sum(input_, output_, "benchmark reduce-scatter");
    return comm_.all_gather(input_, output_, "benchmark all-gather");
  }

  void synchronize() {
    if (options_.device().is_cuda()) torch::cuda::synchronize(options_.device().index());
  }

  // Known values, small enough to be exact in every dtype for a few ranks: rank r contributes
  // r+1 (all-reduce, all-gather) or (r+1)*(b+1) to block b (reduce-scatter).
  int64_t check() {
    const int n = comm_.size(), r = comm_.rank();
    const int64_t count = input_.numel() * (op_ == "all_gather" ? n : 1), block = count / n;
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    torch::Tensor expected;
    if (op_ == "all_reduce") {
      input_.fill_(r + 1);
      expected = torch::full({count}, n * (n + 1) / 2.0, f64);
    } else if (op_ == "reduce_scatter") {
      input_.copy_(((torch::arange(n, f64) + 1) * (r + 1)).repeat_interleave(block));
      expected = torch::full({block}, (r + 1) * n * (n + 1) / 2.0, f64);
    } else {
      output_.zero_();
      input_.fill_(r + 1);
      expected = (torch::arange(n, f64) + 1).repeat_interleave(block);
    }
    issue()->wait();
    const torch::Tensor result = (op_ == "all_reduce" ? input_ : output_).to(torch::kCPU, torch::kDouble);
    const double wrong = result.ne(expected).sum().item<double>();
    return static_cast<int64_t>(mpibert::sum_over_ranks({wrong}, "benchmark check")[0]);
  }

  Communicator& comm_;
  std::string op_;
  torch::TensorOptions options_;
  torch::Tensor input_, output_;
};

std::string format_size(uint64_t bytes) {
  const char* units[] = {"B", "K", "M", "G"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) bytes /= 1024, ++unit;
  return std::to_string(bytes) + units[unit];
}

}  // namespace

int main(int argc, char** argv) {
  mpibert::MpiSession session(&argc, &argv);
  std::string backend = "mpi", op = "all_reduce", dtype = "float";
  uint64_t min_bytes = 1024, max_bytes = 256ull << 20;
  double factor = 2;
  int warmup = 5, iters = 20;
  mpibert::MpiCollectives collectives;
  CLI::App app{"mpibert collective bandwidth (nccl-tests style)"};
  app.add_option("--backend", backend)->check(CLI::IsMember({"mpi", "nccl"}))->capture_default_str();
  app.add_option("--op", op)->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "all"}))->capture_default_str();
  app.add_option("--min-bytes", min_bytes)->transform(CLI::AsSizeValue(false))->capture_default_str();
  app.add_option("--max-bytes", max_bytes)->transform(CLI::AsSizeValue(false))->capture_default_str();
  app.add_option("--factor", factor, "size multiplier from one row to the next")
      ->check(CLI::Range(1.01, 1e6))
      ->capture_default_str();
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--iters", iters)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--dtype", dtype)
      ->check(CLI::IsMember({"float", "double", "half", "bfloat16", "int64", "int32", "uint8"}))
      ->capture_default_str();
  std::string algorithm = "ring";
  app.add_option("--mpi-collectives", algorithm,
                 "ring or openmpi (the MPI backend's all-reduce and all-gather; reduce-scatter is Open MPI's either way)")
      ->check(CLI::IsMember({"ring", "openmpi"}))
      ->capture_default_str();
  app.add_option("--ring-min-bytes", collectives.ring_min_bytes, "the ring from this size on")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  collectives.algorithm = algorithm == "openmpi" ? mpibert::MpiAlgorithm::kOpenMpi : mpibert::MpiAlgorithm::kRing;

  const std::map<std::string, torch::ScalarType> dtypes = {
      {"float", torch::kFloat}, {"double", torch::kDouble}, {"half", torch::kHalf}, {"bfloat16", torch::kBFloat16},
      {"int64", torch::kLong},  {"int32", torch::kInt},     {"uint8", torch::kByte}};
  if (backend == "mpi" && dtype == "half") {
    if (session.rank() == 0) std::fprintf(stderr, "bench_allreduce: the MPI backend has no half sum\n");
    return 1;
  }
  torch::set_num_threads(1);  // the ranks share the cores; fills and checks are not what is timed
  std::unique_ptr<Communicator> comm;
  torch::Device device(torch::kCPU);
  try {
    if (backend == "nccl") {
      device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(mpibert::local_rank()));
      comm = mpibert::make_nccl_communicator(mpibert::local_rank(), 300);
    } else {
      comm = mpibert::make_mpi_communicator(300, collectives);
    }
  } catch (const std::exception& error) {
    if (session.rank() == 0) std::fprintf(stderr, "bench_allreduce: %s\n", error.what());
    return 1;
  }
  const auto options = torch::TensorOptions().dtype(dtypes.at(dtype)).device(device);
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtypes.at(dtype)));

  const std::vector<std::string> ranks =
      mpibert::all_gather_strings(mpibert::host_name() + " pid " + std::to_string(getpid()) + " device " + device.str());
  const bool print = session.rank() == 0;
  if (print) {
    std::printf(
        "# mpibert bench_allreduce: backend %s (%s from %lld B), %d ranks, dtype %s, sizes %s..%s x%g, warmup %d, iters %d\n",
        backend.c_str(), algorithm.c_str(), static_cast<long long>(collectives.ring_min_bytes), comm->size(), dtype.c_str(),
        format_size(min_bytes).c_str(), format_size(max_bytes).c_str(), factor, warmup, iters);
    // The libraries the numbers come from, as nccl-tests prints its NCCL versions.
    const std::string nccl = mpibert::nccl_version();
    std::printf("# LibTorch %s, NCCL %s\n", TORCH_VERSION, nccl.empty() ? "not built" : nccl.c_str());
    for (size_t r = 0; r < ranks.size(); ++r) std::printf("#  Rank %2zu on %s\n", r, ranks[r].c_str());
  }

  const std::vector<std::string> ops = op == "all" ? std::vector<std::string>{"all_reduce", "reduce_scatter", "all_gather"}
                                                   : std::vector<std::string>{op};
  int64_t total_wrong = 0;
  for (const std::string& name : ops) {
    Benchmark benchmark(*comm, name, options);
    if (print) {
      std::printf("#\n# %s\n", name.c_str());
      std::printf("# %12s %12s %8s %10s %8s %8s %7s\n", "size", "count", "type", "time", "algbw", "busbw", "#wrong");
      std::printf("# %12s %12s %8s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    double busbw_sum = 0;
    int rows = 0;
    int64_t wrong = 0;
    const int64_t granule = element * (name == "all_reduce" ? 1 : comm->size());
    int64_t last = 0;
    for (double bytes = static_cast<double>(min_bytes); bytes <= static_cast<double>(max_bytes) * 1.0000001; bytes *= factor) {
      const int64_t size = static_cast<int64_t>(bytes) / granule * granule;  // whole elements per rank
      if (size == 0 || size == last) continue;
      last = size;
      const Result result = benchmark.run(size / element, warmup, iters);
      const double algbw = static_cast<double>(size) / result.seconds / 1e9;
      const double busbw = algbw * benchmark.bus_factor();
      busbw_sum += busbw;
      ++rows;
      wrong += result.wrong;
      if (print) {
        std::printf("  %12lld %12lld %8s %10.1f %8.2f %8.2f %7lld\n", static_cast<long long>(size),
                    static_cast<long long>(result.count), dtype.c_str(), result.seconds * 1e6, algbw, busbw,
                    static_cast<long long>(result.wrong));
        std::fflush(stdout);
      }
    }
    if (print) {
      std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
      std::printf("# Avg bus bandwidth    : %g\n", rows > 0 ? busbw_sum / rows : 0.0);
    }
    total_wrong += wrong;
  }
  return total_wrong == 0 ? 0 : 1;
}
