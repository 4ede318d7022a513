// mpibert-prep: `mpirun -n N mpibert-prep --input F|DIR|PATTERN --tokenizer T --out DIR --split train|eval`
//               `mpirun -n N mpibert-prep --dataset-name OWNER/NAME [--dataset-config C] --tokenizer T --out DIR ...`
//               `mpibert-prep inspect DIR`
#include <CLI/CLI.hpp>
#include <cctype>
#include <csignal>
#include <iostream>

#include "mpibert/cli/prep_command.hpp"
#include "mpibert/cli/whole_number.hpp"
#include "mpibert/core/error.hpp"
#include "mpibert/core/logging.hpp"
#include "mpibert/data/shard_building.hpp"
#include "mpibert/runtime/host_collectives.hpp"

int main(int argc, char** argv) {
  mpibert::PrepOptions options;
  std::string log_level = "info", inspect_dir;
  bool log_all_ranks = false;

  CLI::App app{"Turns SQuAD (nested JSON, flat JSON, JSON Lines or Parquet) into HDF5 feature shards, one per MPI rank."};
  app.add_option("--input", options.input,
                 "SQuAD v1.1/v2.0: nested JSON, run_qa's flat JSON or JSON Lines (plain or .gz), or Parquet as the HF Hub "
                 "stores it; a file, a folder or a glob pattern of shards");
  auto* dataset_name = app.add_option("--dataset-name", options.dataset_name,
                                      "instead of --input: an HF Hub dataset (OWNER/NAME) already downloaded into the HF cache "
                                      "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); --split picks its "
                                      "train or validation files");
  app.add_option("--dataset-config", options.dataset_config, "the dataset's config (default: its only one)")->needs(dataset_name);
  app.add_option("--question-column", options.columns.question, "column of the questions (run_qa's question_column_name)")
      ->capture_default_str();
  app.add_option("--context-column", options.columns.context, "column of the contexts (run_qa's context_column_name)")
      ->capture_default_str();
  app.add_option("--answer-column", options.columns.answers,
                 "column of the answers, with the lists text and answer_start (run_qa's answer_column_name)")
      ->capture_default_str();
  std::string vocab;
  auto* tokenizer = app.add_option("--tokenizer", options.tokenizer,
                                   "the model's tokenizer: its directory (tokenizer.json, or vocab.txt, vocab.json + merges.txt, "
                                   "spm.model, sentencepiece.bpe.model, with tokenizer_config.json) or a tokenizer.json");
  app.add_option("--vocab", vocab, "an uncased BERT's WordPiece vocab.txt (the shortcut of --tokenizer for it)")
      ->excludes(tokenizer);
  app.add_option("--out", options.out_dir, "output directory");
  app.add_option("--split", options.split, "train or eval")->capture_default_str();
  app.add_option("--max-seq-length", options.params.max_seq_length)
      ->transform(mpibert::whole_number<int32_t>())
      ->capture_default_str();
  app.add_option("--doc-stride", options.params.doc_stride, "overlap of consecutive windows, in tokens")
      ->transform(mpibert::whole_number<int32_t>())
      ->capture_default_str();
  app.add_option("--max-query-length", options.params.max_query_length, "truncate questions to this many tokens (0: never)")
      ->transform(mpibert::whole_number<int32_t>())
      ->capture_default_str();
  app.add_flag("--overwrite", options.overwrite, "replace shards made with other parameters in --out");
  app.add_option("--log-level", log_level)->capture_default_str();
  app.add_flag("--log-all-ranks", log_all_ranks, "log info lines from every rank, not only rank 0");
  auto* inspect = app.add_subcommand("inspect", "print JSON statistics of a prepared directory");
  inspect->add_option("dir", inspect_dir)->required();
  std::string split_input, split_output, article_range;
  auto* split = app.add_subcommand("split", "write some articles of a SQuAD file as a new one (split a dev set by article)");
  split->add_option("input", split_input, "SQuAD JSON, plain or .gz")->required();
  split->add_option("--articles", article_range, "BEGIN:END, end exclusive; negative counts from the end (e.g. 0:-8)")
      ->required();
  split->add_option("--out", split_output, "output JSON file")->required();
  CLI11_PARSE(app, argc, argv);

  if (split->parsed()) {
    try {
      const size_t colon = article_range.find(':');
      // A whole number, optionally negative, that fits: anything else names the option and what was given.
      auto article = [&](const std::string& text) {
        size_t used = 0;
        int64_t value = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = std::string::npos;
        }
        if (text.empty() || used != text.size() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-'))
          throw mpibert::InputError(mpibert::describe("--articles", article_range,
                                                      "expected BEGIN:END, two whole numbers (negative counts from the end)"));
        return value;
      };
      if (colon == std::string::npos)
        throw mpibert::InputError(mpibert::describe("--articles", article_range, "expected BEGIN:END, e.g. 0:-8"));
      mpibert::write_article_subset(split_input, article(article_range.substr(0, colon)),
                                    article(article_range.substr(colon + 1)), split_output);
      return 0;
    } catch (const std::exception& e) {
      std::cerr << "mpibert-prep split: " << e.what() << std::endl;
      return 1;
    }
  }

  if (inspect->parsed()) {
    try {
      std::cout << mpibert::inspect_shards(inspect_dir).dump(2) << std::endl;
      return 0;
    } catch (const std::exception& e) {
      std::cerr << "mpibert-prep inspect: " << e.what() << std::endl;
      return 1;
    }
  }
  if (app.count("--input") + app.count("--dataset-name") != 1) {
    std::cerr << "mpibert-prep: give one of --input and --dataset-name\n" << app.help();
    return 2;
  }
  if (app.count("--out") == 0) {
    std::cerr << "mpibert-prep: --out is required\n" << app.help();
    return 2;
  }
  if (options.tokenizer.empty() && vocab.empty()) {
    std::cerr << "mpibert-prep: --tokenizer (or --vocab) is required\n" << app.help();
    return 2;
  }
  if (options.tokenizer.empty()) options.tokenizer = vocab;

  // A write past RLIMIT_FSIZE must fail with EFBIG and be reported, not kill the rank silently.
  std::signal(SIGXFSZ, SIG_IGN);
  mpibert::MpiSession mpi(&argc, &argv);
  try {
    mpibert::init_logging(mpi.rank(), mpi.size(), log_level, log_all_ranks);
    return mpibert::run_prep(options, mpi.rank(), mpi.size());
  } catch (const std::exception& e) {
    // Outside the agreed protocol: bring every rank down now rather than leave one waiting.
    std::cerr << "[rank " << mpi.rank() << "] mpibert-prep: " << e.what() << std::endl;
    mpibert::abort_job(1);
  }
}
