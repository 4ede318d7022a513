// SQuAD records from Parquet as the HF Hub stores datasets (rajpurkar/squad and squad_v2:
// plain_text/{train,validation}-*.parquet with the columns id, title, context, question and
// answers, a struct of the lists text and answer_start; unanswerable questions have empty lists),
// read with Apache Arrow's parquet::arrow::FileReader a row group at a time. Arrow comes from
// PyPI's pyarrow wheel; no Arrow type appears here.
#pragma once

#include <string>

#include "mpibert/data/squad_records.hpp"

namespace mpibert {

// Whether the file starts with Parquet's magic bytes ("PAR1").
bool is_parquet_file(const std::string& path);

// Adds the file's records, in row order, to `assembler` ("row N" from 0, as datasets counts). A
// file Arrow cannot read (truncated, corrupt), a missing column or one of another type, and a
// null value are InputErrors naming the file, the column and, for values, the row.
void read_parquet_records(const std::string& path, const SquadColumns& columns, SquadAssembler& assembler);

}  // namespace mpibert
