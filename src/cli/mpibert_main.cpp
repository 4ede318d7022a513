// mpibert: the user-facing binary. Subcommands grow with the project (tokenize now; train later).
#include <CLI/CLI.hpp>
#include <iostream>

#include "mpibert/cli.hpp"
#include "mpibert/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"mpibert: distributed BERT fine-tuning for SQuAD"};
  app.require_subcommand(1);

  std::string vocab_path;
  int max_word_chars = mpibert::WordPieceTokenizer::kHuggingFaceMaxWordChars;
  auto* tokenize = app.add_subcommand("tokenize", "WordPiece-tokenize stdin lines, print one JSON object per line");
  tokenize->add_option("--vocab", vocab_path, "vocab.txt")->required();
  tokenize->add_option("--max-word-chars", max_word_chars, "longer words become [UNK] (HF 100, Google 200)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (tokenize->parsed()) {
      mpibert::WordPieceTokenizer tokenizer(mpibert::Vocab::load(vocab_path), max_word_chars);
      std::ios::sync_with_stdio(false);
      return mpibert::tokenize_lines(tokenizer, std::cin, std::cout, std::cerr);
    }
  } catch (const std::exception& e) {
    std::cerr << "mpibert: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
