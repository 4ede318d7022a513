#include "mpibert/runtime/device.hpp"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "mpibert/core/error.hpp"

#if defined(MPIBERT_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace mpibert {
namespace {

// "13.0" from 13000, "9.19.0" from 91900: CUDA's and cuDNN's version codes.
std::string cuda_version_text(long code) { return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10); }
std::string cudnn_version_text(long code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100);
}

std::string nvidia_driver_version() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string line;
  return std::getline(file, line) ? parse_nvidia_driver_version(line) : "";
}

}  // namespace

std::string parse_nvidia_driver_version(const std::string& line) {
  std::istringstream words(line);
  for (std::string word; words >> word;) {
    const bool dotted_number = std::isdigit(static_cast<unsigned char>(word.front())) &&
                               std::isdigit(static_cast<unsigned char>(word.back())) && word.find('.') != std::string::npos &&
                               word.find_first_not_of("0123456789.") == std::string::npos;
    if (dotted_number) return word;
  }
  return "";
}

const char* device_choice_name(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kCpu: return "cpu";
    case DeviceChoice::kCuda: return "cuda";
    case DeviceChoice::kAuto: break;
  }
  return "auto";
}

torch::Device select_device(DeviceChoice choice, int local_rank) {
  if (choice == DeviceChoice::kCpu) return torch::Device(torch::kCPU);
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus == 0) {
    if (choice == DeviceChoice::kCuda)
      throw InputError(describe("--device", device_choice_name(choice), "no CUDA GPU is visible to this process"));
    return torch::Device(torch::kCPU);
  }
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
#if defined(MPIBERT_WITH_CUDA)
  c10::cuda::set_device(device.index());
#endif
  // cuDNN's attention builds a graph for every new sequence length, and dynamic padding (in
  // training and in evaluation) brings a new one batch after batch (bench/sdpa_shapes.py;
  // docs/benchmarks.md): the memory-efficient kernel takes the padding mask as well, with no
  // such cost.
  at::globalContext().setSDPUseCuDNN(false);
  return device;
}

void set_tf32(bool enabled) {
  at::globalContext().setAllowTF32CuBLAS(enabled);
  at::globalContext().setAllowTF32CuDNN(enabled);
}

void set_deterministic(bool enabled) {
  at::globalContext().setDeterministicAlgorithms(enabled, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(enabled);
  at::globalContext().setSDPUseFlash(!enabled);
  at::globalContext().setSDPUseMemEfficient(!enabled);
  // cuBLAS is deterministic only with a fixed workspace; torch checks this variable and refuses
  // deterministic mode without it. A user's own setting is kept.
  if (enabled) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double measure_matmul_flops_per_second(const torch::Device& device, torch::ScalarType dtype, double seconds) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  // On a GPU n = 4096: enough to reach the GEMM rate, and its 200 MB stay below a training
  // step's peak, which peak_allocated_bytes reports. On a CPU up to 1024, as large as a product
  // taking at most a quarter of `seconds` allows: CPUs without fp16 or bf16 GEMM kernels run
  // those at a few GFLOP/s, where one 1024 product alone would take seconds.
  int64_t n = device.is_cuda() ? 4096 : 1024;
  if (!device.is_cuda()) {
    n = 256;
    const torch::Tensor probe = torch::full({n, n}, 0.5, options);
    (void)torch::matmul(probe, probe);  // warm-up
    const auto begin = std::chrono::steady_clock::now();
    (void)torch::matmul(probe, probe);
    const double one = std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(), 1e-9);
    const auto product_seconds = [one](int64_t size) { return one * std::pow(static_cast<double>(size) / 256, 3); };
    while (n < 1024 && product_seconds(n * 2) <= seconds / 4) n *= 2;
  }
  // Constant operands: the speed does not depend on the values, and the run's random streams
  // (weights, dropout, the order of the data) must not move.
  const torch::Tensor a = torch::full({n, n}, 0.5, options), b = torch::full({n, n}, 0.25, options);
  torch::Tensor c = torch::matmul(a, b);  // warm-up: kernels chosen, memory in place
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  int64_t products = 0;
  double elapsed = 0;
  do {
    torch::matmul_out(c, a, b);
    synchronize(device);
    ++products;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < seconds);
  return 2.0 * static_cast<double>(n * n * n) * static_cast<double>(products) / elapsed;
}

int64_t peak_memory_bytes(const torch::Device& device) {
#if defined(MPIBERT_WITH_CUDA)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  return 0;
}

int64_t peak_allocated_bytes(const torch::Device& device) {
#if defined(MPIBERT_WITH_CUDA)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  return 0;
}

nlohmann::ordered_json describe_device(const torch::Device& device) {
  if (!device.is_cuda()) return {{"type", "cpu"}};
  nlohmann::ordered_json info = {{"type", "cuda"}, {"index", device.index()}};
#if defined(MPIBERT_WITH_CUDA)
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device.index()) == cudaSuccess) {
    info["name"] = properties.name;
    info["memory_bytes"] = properties.totalGlobalMem;
    info["capability"] = std::to_string(properties.major) + "." + std::to_string(properties.minor);
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) info["driver_cuda_version"] = cuda_version_text(driver);
#endif
  info["driver"] = nvidia_driver_version();
  info["count"] = torch::cuda::device_count();
  info["cuda_runtime"] = cuda_version_text(at::detail::getCUDAHooks().versionCUDART());
  info["cudnn"] = cudnn_version_text(at::detail::getCUDAHooks().versionCuDNN());
  return info;
}

}  // namespace mpibert
