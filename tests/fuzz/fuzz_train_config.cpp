// The TOML options file of `mpibert train --config FILE`, through the command line the product
// builds (CLI11's config reader and our options' conversions and checks). Parsing only: no run.
#include <CLI/CLI.hpp>

#include "fuzz_input.hpp"
#include "mpibert/cli/commands.hpp"
#include "mpibert/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mpibert::fuzz::write_file("train.toml", mpibert::fuzz::as_text(data, size));
  CLI::App app("mpibert");
  mpibert::ModelCommands commands(app);
  const char* argv[] = {"mpibert", "train", "--config", path.c_str()};
  try {
    app.parse(4, const_cast<char**>(argv));
  } catch (const CLI::ParseError&) {
  } catch (const mpibert::InputError&) {
  }
  return 0;
}
