// manifest.json of a prepared directory.
#include "fuzz_input.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/data/shards.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("prepared/manifest.json", mpibert::fuzz::as_text(data, size));
  try {
    const mpibert::Manifest manifest = mpibert::read_manifest(std::filesystem::path(path).parent_path().string());
    (void)mpibert::manifest_to_json(manifest);
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
