// `mpibert score`'s inputs: a dataset, its predictions and (v2) no-answer probabilities, one
// input split in three (fuzz_input.hpp's separator), scored as the official scripts do.
#include <sstream>

#include "fuzz_input.hpp"
#include "mpibert/cli/commands.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = mpibert::fuzz::split(mpibert::fuzz::as_text(data, size), 3);
  const std::string dataset = mpibert::fuzz::write_file("score/dataset.json", parts[0]);
  const std::string predictions = mpibert::fuzz::write_file("score/predictions.json", parts[1]);
  const std::string na_probs = parts[2].empty() ? "" : mpibert::fuzz::write_file("score/na_probs.json", parts[2]);
  std::ostringstream out, err;
  const int status = mpibert::score_command(dataset, predictions, na_probs, 1.0, "", out, err);
  if (status != 0 && err.str().empty()) __builtin_trap();  // a refusal always says why
  return 0;
}
