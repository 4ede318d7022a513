// safetensors files (model.safetensors, optimizer and rank files): header JSON, dtypes, shapes and
// data offsets. A file that opens must have every tensor inside the mapping: each is read whole.
#include <torch/torch.h>

#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/nn/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("model.safetensors", mpibert::fuzz::as_text(data, size));
  try {
    const mpibert::SafetensorsFile file = mpibert::SafetensorsFile::open(path);
    for (const auto& [name, tensor] : file.tensors()) {
      const auto* bytes = static_cast<const uint8_t*>(tensor.data_ptr());
      uint8_t sum = 0;
      for (int64_t i = 0; i < tensor.numel() * static_cast<int64_t>(tensor.element_size()); ++i) sum ^= bytes[i];
      (void)sum;
      if (!file.find(name)) __builtin_trap();
    }
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
