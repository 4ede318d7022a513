// Internal: bf16 for the MPI backend. MPI has neither a bf16 type nor a bf16 sum: the backend uses
// a 2-byte datatype of its own and a user-defined sum that adds in float32 and rounds to nearest
// even once per addition, as NCCL's bf16 sum does, so that a bf16 reduction gives the same bits on
// either backend for the same order of additions. Both are made on first use (after MPI_Init) and
// live until MPI_Finalize.
#pragma once

#include <mpi.h>

#include <cstdint>

namespace mpibert {

MPI_Datatype mpi_bfloat16();
MPI_Op mpi_bfloat16_sum();
// sum[i] = bf16(float(sum[i]) + float(addend[i])), for the ring's additions.
void add_bfloat16(void* sum, const void* addend, int64_t count);

}  // namespace mpibert
