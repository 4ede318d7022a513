// HF config.json, as `--model` and `--model-config` read it: its model_type picks the family
// (model/model_registry.hpp), whose reader parses and checks every key.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/model/model_registry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("config.json", mpibert::fuzz::as_text(data, size));
  try {
    (void)mpibert::read_qa_model_config(mpibert::read_json_file(path), path).dump();
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
