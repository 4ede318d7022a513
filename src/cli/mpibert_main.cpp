// mpibert: the user-facing binary. Subcommands grow with the project (tokenize, score, train, eval, predict).
#include <CLI/CLI.hpp>
#include <iostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/process.hpp"
#include "mpibert/eval/squad_metrics.hpp"

int main(int argc, char** argv) {
  mpibert::keep_freed_memory_for_reuse();
  CLI::App app{"mpibert: distributed BERT fine-tuning for SQuAD"};
  app.require_subcommand(1);

  std::string vocab_path;
  int max_word_chars = mpibert::WordPieceTokenizer::kHuggingFaceMaxWordChars;
  auto* tokenize = app.add_subcommand("tokenize", "WordPiece-tokenize stdin lines, print one JSON object per line");
  tokenize->add_option("--vocab", vocab_path, "vocab.txt")->required();
  tokenize->add_option("--max-word-chars", max_word_chars, "longer words become [UNK] (HF 100, Google 200)")
      ->capture_default_str();

  std::string dataset, predictions, na_prob_file, out_file;
  double na_prob_thresh = 1.0;
  auto* score =
      app.add_subcommand("score", "score SQuAD predictions exactly as the official evaluate-v1.1.py / evaluate-v2.0.py");
  score->add_option("--dataset", dataset, "SQuAD dataset (.json or .json.gz)")->required();
  score->add_option("--predictions", predictions, "JSON object {question id: answer}")->required();
  score->add_option("--na-prob-file", na_prob_file, "v2.0: JSON object {question id: no-answer probability}");
  score->add_option("--na-prob-thresh", na_prob_thresh, "v2.0: predict no answer above this")->capture_default_str();
  score->add_option("--out-file", out_file, "write the JSON here instead of stdout");
  mpibert::ModelCommands model_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 names the option and what it accepts; every refusal exits 1, --help 0.
    return app.exit(e) == 0 ? 0 : 1;
  }

  try {
    if (tokenize->parsed()) {
      mpibert::WordPieceTokenizer tokenizer(mpibert::Vocab::load(vocab_path), max_word_chars);
      std::ios::sync_with_stdio(false);
      return mpibert::tokenize_lines(tokenizer, std::cin, std::cout, std::cerr);
    }
    if (model_commands.parsed()) return model_commands.run();
    if (score->parsed())
      return mpibert::score_command(dataset, predictions, na_prob_file, na_prob_thresh, out_file, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::cerr << "mpibert: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
