// ctest build.install's consumer: uses the installed headers and libraries the way another project
// would. Tokenizes TEXT with VOCAB (a vocab.txt, a tokenizer.json or a model directory), scores the answer PREDICTION against
// GOLD as the official SQuAD v1.1 script does, and builds the BERT of MODEL_CONFIG (config.json), printing
//   tokens: T1 T2 ...
//   score: exact E f1 F
//   parameters: N
#include <torch/torch.h>

#include <exception>
#include <iostream>
#include <string>

#include "mpibert/eval/squad_metrics.hpp"
#include "mpibert/model/bert_qa.hpp"
#include "mpibert/text/hf_tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: consumer VOCAB MODEL_CONFIG TEXT GOLD PREDICTION\n";
    return 2;
  }
  try {
    const mpibert::HfTokenizer tokenizer = mpibert::HfTokenizer::load(argv[1]);
    std::cout << "tokens:";
    for (const std::string& token : tokenizer.encode(argv[3]).tokens) std::cout << " " << token;
    std::cout << "\n";
    std::cout << "score: exact " << mpibert::squad_exact(argv[4], argv[5]) << " f1 "
              << mpibert::squad_f1(argv[4], argv[5], /*v2_rules=*/false) << "\n";
    mpibert::BertForQuestionAnswering model(mpibert::BertConfig::load(argv[2]));
    std::cout << "parameters: " << mpibert::count_parameters(*model) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
