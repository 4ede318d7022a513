// mpibert: the user-facing binary. Subcommands grow with the project (tokenize, score, train, eval, predict).
#include <CLI/CLI.hpp>
#include <iostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/process.hpp"

int main(int argc, char** argv) {
  mpibert::keep_freed_memory_for_reuse();
  CLI::App app{"mpibert: distributed BERT fine-tuning for SQuAD"};
  app.require_subcommand(1);
  mpibert::TextCommands text_commands(app);
  mpibert::ModelCommands model_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 names the option and what it accepts; every refusal exits 1, --help and --version 0.
    return app.exit(e) == 0 ? 0 : 1;
  }

  try {
    if (model_commands.parsed()) return model_commands.run();
    if (text_commands.parsed()) return text_commands.run();
  } catch (const std::exception& e) {
    std::cerr << "mpibert: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
