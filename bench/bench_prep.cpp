// Preparation throughput: `mpirun -n N bench_prep --input F [--repeats R] [--read-only]`.
// Times run_prep end to end inside the ranks (MPI start-up excluded; the shell script around
// this measures whole-command wall time too) and prints features/s and input MB/s; with
// --read-only, reading and checking the input alone (read_squad_input, any format), questions/s.
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "mpibert/cli/prep_command.hpp"
#include "mpibert/core/io.hpp"
#include "mpibert/core/logging.hpp"
#include "mpibert/data/shards.hpp"
#include "mpibert/data/squad_input.hpp"
#include "mpibert/runtime/host_collectives.hpp"

int main(int argc, char** argv) {
  mpibert::PrepOptions options;
  int repeats = 3;
  bool read_only = false;
  CLI::App app{"mpibert-prep throughput"};
  app.add_option("--input", options.input)->required();
  app.add_option("--tokenizer,--vocab", options.tokenizer, "a model directory, a tokenizer.json or a vocab.txt")->required();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--max-seq-length", options.params.max_seq_length)->capture_default_str();
  app.add_option("--doc-stride", options.params.doc_stride)->capture_default_str();
  app.add_flag("--read-only", read_only, "time reading and checking the input alone");
  CLI11_PARSE(app, argc, argv);

  mpibert::MpiSession mpi(&argc, &argv);
  mpibert::init_logging(mpi.rank(), mpi.size(), "warn");
  char dir[256] = "/tmp/mpibert-bench-XXXXXX";
  if (mpi.rank() == 0 && !::mkdtemp(dir)) mpibert::abort_job(1);
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  options.out_dir = std::string(dir) + "/shards";
  options.overwrite = true;

  double best = 1e30;
  size_t questions = 0;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    if (read_only)
      questions = mpibert::read_squad_input(mpibert::SquadSource{options.input}).data.examples.size();
    else if (mpibert::run_prep(options, mpi.rank(), mpi.size()) != 0)
      mpibert::abort_job(1);
    const double seconds =
        mpibert::max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    best = std::min(best, seconds);
  }
  // Read only: the bytes as stored; the whole preparation: inflated, as before.
  const double megabytes =
      static_cast<double>((read_only ? mpibert::read_file_bytes(options.input) : mpibert::read_file(options.input)).size()) / 1e6;
  if (mpi.rank() == 0 && read_only) {
    std::printf("%-28s read only  questions %6zu  best of %d: %6.3f s  %9.0f questions/s  %6.2f MB/s (as stored)\n",
                std::filesystem::path(options.input).filename().c_str(), questions, repeats, best,
                static_cast<double>(questions) / best, megabytes / best);
  } else if (mpi.rank() == 0) {
    const auto manifest = mpibert::read_manifest(options.out_dir);
    std::printf("%-28s ranks %d  features %7lld  examples %6lld  best of %d: %6.3f s  %9.0f features/s  %6.2f MB/s\n",
                std::filesystem::path(options.input).filename().c_str(), mpi.size(),
                static_cast<long long>(manifest.num_features), static_cast<long long>(manifest.num_examples), repeats, best,
                static_cast<double>(manifest.num_features) / best, megabytes / best);
  }
  if (mpi.rank() == 0) std::filesystem::remove_all(dir);
  return 0;
}
