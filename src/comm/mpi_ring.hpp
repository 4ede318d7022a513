// Internal: ring all-reduce and all-gather over MPI point-to-point, for the MPI communicator's
// large buffers. In a ring every rank sends and receives (N-1)/N of the buffer per phase (an
// all-reduce is a reduce-scatter phase, then an all-gather phase), the bandwidth optimum. Kept
// where Open MPI's own algorithms, its ring included, were measured slower; reduce-scatter is Open
// MPI's (MPI_Reduce_scatter), which measured on par (docs/measurements.md).
// Each block is summed on one rank in ring order and then forwarded, so every rank ends with the
// same bits. Supported types: MPI_FLOAT, MPI_DOUBLE, MPI_INT64_T, MPI_INT32_T, MPI_UINT8_T and
// mpi_bfloat16() (mpi_bfloat16.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>

namespace mpibert {

// `data` (count elements) becomes the sum over ranks, in place.
void ring_all_reduce_sum(void* data, int64_t count, MPI_Datatype type, MPI_Comm comm);
// `output` holds size blocks of `block_count`; block r gets rank r's `input` (nullptr: already in
// block rank of `output`).
void ring_all_gather(const void* input, void* output, int64_t block_count, MPI_Datatype type, MPI_Comm comm);

}  // namespace mpibert
