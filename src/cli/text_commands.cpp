#include <CLI/CLI.hpp>

#include <iostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/core/error.hpp"

namespace mpibert {

struct TextCommands::Impl {
  CLI::App *tokenize = nullptr, *score = nullptr;
  std::string tokenizer_path, vocab_path;
  std::string dataset, predictions, na_prob_file, out_file;
  double na_prob_thresh = 1.0;
};

TextCommands::TextCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.tokenize = app.add_subcommand("tokenize", "tokenize stdin lines as the model's HF tokenizer does, one JSON object per line");
  auto* tokenizer = m.tokenize
                        ->add_option("--tokenizer", m.tokenizer_path,
                                     "a model directory (its tokenizer.json or slow tokenizer files) or a tokenizer.json")
                        ->group("Tokenizer");
  m.tokenize->add_option("--vocab", m.vocab_path, "an uncased BERT's WordPiece vocab.txt")
      ->excludes(tokenizer)
      ->group("Tokenizer");
  m.score = app.add_subcommand("score", "score SQuAD predictions exactly as the official evaluate-v1.1.py / evaluate-v2.0.py");
  m.score->add_option("--dataset", m.dataset, "SQuAD dataset (.json or .json.gz)")->required()->group("Inputs");
  m.score->add_option("--predictions", m.predictions, "JSON object {question id: answer}")->required()->group("Inputs");
  m.score->add_option("--na-prob-file", m.na_prob_file, "v2.0: JSON object {question id: no-answer probability}")
      ->group("Inputs");
  m.score->add_option("--na-prob-thresh", m.na_prob_thresh, "v2.0: predict no answer above this")
      ->capture_default_str()
      ->group("Scoring");
  m.score->add_option("--out-file", m.out_file, "write the JSON here instead of stdout")->group("Output");
}

TextCommands::~TextCommands() = default;

bool TextCommands::parsed() const { return impl_->tokenize->parsed() || impl_->score->parsed(); }

int TextCommands::run() {
  const Impl& m = *impl_;
  if (m.tokenize->parsed()) {
    if (m.tokenizer_path.empty() && m.vocab_path.empty()) {
      std::cerr << "mpibert tokenize: --tokenizer (or --vocab) is required\n";
      return 2;
    }
    std::ios::sync_with_stdio(false);
    try {
      return tokenize_lines(HfTokenizer::load(m.tokenizer_path.empty() ? m.vocab_path : m.tokenizer_path), std::cin, std::cout,
                            std::cerr);
    } catch (const InputError& e) {
      std::cerr << "mpibert tokenize: " << e.what() << "\n";
      return 1;
    }
  }
  return score_command(m.dataset, m.predictions, m.na_prob_file, m.na_prob_thresh, m.out_file, std::cout, std::cerr);
}

}  // namespace mpibert
