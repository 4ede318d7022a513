// HF config.json, as `--model` and `--model-config` read it.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/model/bert_qa.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("config.json", mpibert::fuzz::as_text(data, size));
  try {
    const mpibert::BertConfig config = mpibert::BertConfig::load(path);
    (void)config.to_json().dump();
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
