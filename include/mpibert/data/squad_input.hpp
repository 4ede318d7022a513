// Where mpibert-prep's SQuAD comes from, read whatever its format: SQuAD's nested JSON, run_qa.py's
// flat JSON, JSON Lines (each plain or gzip) or Parquet as the HF Hub stores it, v1.1 or v2.0; as
// one file, a folder, a glob pattern of shards, or an HF Hub dataset already downloaded into the HF
// cache. Every format gives the same SquadDataset for the same articles (squad_records.hpp says
// how records become paragraphs and articles), hence the same shards.
#pragma once

#include <string>
#include <vector>

#include "mpibert/data/squad.hpp"
#include "mpibert/data/squad_records.hpp"

namespace mpibert {

struct SquadSource {
  std::string input;            // a file, a folder or a glob pattern; or empty, and:
  std::string dataset_name;     // an HF Hub dataset (OWNER/NAME) in the HF cache
  std::string dataset_config;   // its config (a folder of the repository); default: its only one
  std::string split = "train";  // "train" or "eval": the Hub's train or validation files
  SquadColumns columns;         // of records (not of nested JSON)
};

struct SquadInput {
  std::vector<std::string> files;  // in the order read
  std::string origin;              // the input as the manifest records it: a path or a pattern
  std::string format;              // "nested SQuAD JSON", "flat JSON", "JSON Lines" or "Parquet"
  SquadDataset data;
};

// Reads and checks every file of the source; every problem is an InputError naming the file, the
// record and the field. Nested SQuAD JSON is read one file at a time; the other formats may come
// in several files of one format, whose records are read in file-name order.
SquadInput read_squad_input(const SquadSource& source);

// The files a source names, sorted by name: a file; a folder's data files (.parquet, .json,
// .jsonl, .ndjson, each maybe .gz), only those of the split where they are the Hub's split files
// (train-*, validation-*); a glob pattern's matches; a Hub dataset's CONFIG/SPLIT-*.parquet or
// CONFIG/SPLIT/*.parquet in its snapshot in the HF cache. None is an InputError saying where it
// looked.
std::vector<std::string> squad_source_files(const SquadSource& source, std::string* origin);

// The HF Hub cache as huggingface_hub finds it: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::string hf_hub_cache_dir();

}  // namespace mpibert
