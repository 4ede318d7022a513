// A checkpoint's own files, as a resume reads them: trainer_state.json, checksums.json and a
// rank-R.safetensors with its RNG state, one input split in three (fuzz_input.hpp's separator).
#include <torch/torch.h>

#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/train/training_checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mpibert::fuzz::split(mpibert::fuzz::as_text(data, size), 3);
  const std::string state = mpibert::fuzz::write_file("checkpoint-1/trainer_state.json", parts[0]);
  const std::string sums = mpibert::fuzz::write_file("checkpoint-1/checksums.json", parts[1]);
  const std::string own = mpibert::fuzz::write_file("checkpoint-1/rank-0.safetensors", parts[2]);
  try {
    (void)mpibert::read_trainer_state(state);
  } catch (const mpibert::InputError&) {
  }
  try {
    mpibert::verify_checkpoint(std::filesystem::path(sums).parent_path().string(), 0);
  } catch (const mpibert::InputError&) {
  }
  try {
    mpibert::restore_rng_state(torch::kCPU, mpibert::SafetensorsFile::open(own), "cpu_rng_state");
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
