// ctest build.install's consumer: uses the installed headers and libraries the way another project
// would. Tokenizes TEXT with VOCAB and builds the BERT of MODEL_CONFIG (config.json), printing
//   tokens: T1 T2 ...
//   parameters: N
#include <torch/torch.h>

#include <exception>
#include <iostream>
#include <string>

#include "mpibert/model/bert_qa.hpp"
#include "mpibert/text/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: consumer VOCAB MODEL_CONFIG TEXT\n";
    return 2;
  }
  try {
    const mpibert::WordPieceTokenizer tokenizer(mpibert::Vocab::load(argv[1]));
    std::cout << "tokens:";
    for (const std::string& token : tokenizer.tokens(tokenizer.encode(argv[3]))) std::cout << " " << token;
    std::cout << "\n";
    mpibert::BertForQuestionAnswering model(mpibert::BertConfig::load(argv[2]));
    std::cout << "parameters: " << mpibert::count_parameters(*model) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
