#include <CLI/CLI.hpp>

#include <iostream>

#include "mpibert/cli/commands.hpp"
#include "mpibert/cli/whole_number.hpp"

namespace mpibert {

struct TextCommands::Impl {
  CLI::App *tokenize = nullptr, *score = nullptr;
  std::string vocab_path;
  int max_word_chars = WordPieceTokenizer::kHuggingFaceMaxWordChars;
  std::string dataset, predictions, na_prob_file, out_file;
  double na_prob_thresh = 1.0;
};

TextCommands::TextCommands(CLI::App& app) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.tokenize = app.add_subcommand("tokenize", "WordPiece-tokenize stdin lines, print one JSON object per line");
  m.tokenize->add_option("--vocab", m.vocab_path, "vocab.txt")->required()->group("Tokenizer");
  m.tokenize->add_option("--max-word-chars", m.max_word_chars, "longer words become [UNK] (HF 100, Google 200)")
      ->transform(whole_number<decltype(m.max_word_chars)>())
      ->capture_default_str()
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
    WordPieceTokenizer tokenizer(Vocab::load(m.vocab_path), m.max_word_chars);
    std::ios::sync_with_stdio(false);
    return tokenize_lines(tokenizer, std::cin, std::cout, std::cerr);
  }
  return score_command(m.dataset, m.predictions, m.na_prob_file, m.na_prob_thresh, m.out_file, std::cout, std::cerr);
}

}  // namespace mpibert
