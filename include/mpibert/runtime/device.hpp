// Where a rank computes: --device auto|cpu|cuda, the node-local GPU of each rank, the numeric
// modes (TF32) and what the run record says about the hardware and its software.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>

namespace mpibert {

// --device: kCpu; kCuda: GPU `local_rank` (host_collectives.hpp) modulo the GPUs this process
// sees (an error without one); kAuto: that GPU when there is one, else the CPU.
enum class DeviceChoice { kAuto, kCpu, kCuda };
const char* device_choice_name(DeviceChoice choice);  // "auto", "cpu", "cuda"

// The device `choice` resolves to on this rank. Makes a CUDA device the current one, and leaves
// cuDNN's attention out (it builds a graph for each new sequence length).
torch::Device select_device(DeviceChoice choice, int local_rank);

// TF32 for float32 matrix products and convolutions on GPUs (HF's --tf32); off is exact fp32.
void set_tf32(bool enabled);

// --deterministic: torch's deterministic algorithms (an error from any op that has none), cuBLAS's
// fixed workspace, and on GPUs the math attention backend (the fused attention kernels' backward
// adds with atomics, in an order that changes from run to run). For bit-exact reruns and resumes
// on a GPU; slower. Call before the first CUDA matrix product (cuBLAS reads its variable then).
void set_deterministic(bool enabled);

// Waits for the device's queued work (a no-op on the CPU): for timings at logging steps only.
void synchronize(const torch::Device& device);

// The rate of square matrix products in `dtype` on `device` (FLOP/s), with the threads and
// numeric modes the process has: the limit a run's model FLOP/s is measured against (MFU).
// Takes about `seconds` (n = 1024 on the CPU, 4096 on a GPU; one warm-up product first).
double measure_matmul_flops_per_second(const torch::Device& device, torch::ScalarType dtype, double seconds = 0.25);

// The most memory the caching allocator held on a CUDA device since the start, 0 on the CPU.
int64_t peak_memory_bytes(const torch::Device& device);
// The most memory tensors held on a CUDA device since the start (allocated, not reserved), 0 on the CPU.
int64_t peak_allocated_bytes(const torch::Device& device);

// The driver's version from the first line of /proc/driver/nvidia/version, for proprietary and
// open kernel modules alike ("...Kernel Module  580.95.05  ..." and "...Open Kernel Module for
// x86_64  580.159  ..."): its first dotted number; "" when there is none.
std::string parse_nvidia_driver_version(const std::string& line);

// For results.json: {"type": "cpu"|"cuda", "name", "count", "memory_bytes", "capability",
// "driver", "cuda_runtime", "cudnn"} (CUDA keys only on a GPU; the run record adds NCCL's version).
nlohmann::ordered_json describe_device(const torch::Device& device);

}  // namespace mpibert
