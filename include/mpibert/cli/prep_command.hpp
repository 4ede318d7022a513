// mpibert-prep: SQuAD (nested JSON, flat JSON, JSON Lines, Parquet) -> HDF5 feature shards, one per
// MPI rank, plus a manifest.
#pragma once

#include <string>

#include "mpibert/data/features.hpp"
#include "mpibert/data/squad_records.hpp"

namespace mpibert {

struct PrepOptions {
  std::string input, out_dir;   // input: a file, a folder or a glob pattern, any format of squad_input.hpp
  std::string tokenizer;        // a model directory, a tokenizer.json or a vocab.txt (HfTokenizer::load)
  std::string split = "train";  // "train" or "eval": recorded, and checked by the trainer
  FeatureParams params;
  bool overwrite = false;                    // replace shards made with other parameters
  std::string dataset_name, dataset_config;  // instead of input: an HF Hub dataset in the HF cache
  SquadColumns columns;                      // of record formats (run_qa.py's *_column_name)
};

// Runs collectively on every rank of MPI_COMM_WORLD; returns the process exit status, the same on
// every rank. Shards are written under temporary names and renamed only once every rank has
// succeeded; rank 0 writes the manifest last. On failure no file is left under a final name.
int run_prep(const PrepOptions& options, int rank, int world_size);

}  // namespace mpibert
