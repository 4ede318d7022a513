#include "mpi_bfloat16.hpp"

#include <c10/util/BFloat16.h>

#include "mpibert/runtime/mpi_own_allocations.hpp"

namespace mpibert {
namespace {

// MPI's user-function signature: inout[i] = in[i] + inout[i].
void bfloat16_sum(void* in, void* inout, int* len, MPI_Datatype* /*type*/) { add_bfloat16(inout, in, *len); }

}  // namespace

MPI_Datatype mpi_bfloat16() {
  static const MPI_Datatype type = [] {
    const OpenMpiOwnAllocations not_ours;
    MPI_Datatype made;
    MPI_Type_contiguous(2, MPI_BYTE, &made);
    MPI_Type_commit(&made);
    return made;
  }();
  return type;
}

MPI_Op mpi_bfloat16_sum() {
  static const MPI_Op op = [] {
    const OpenMpiOwnAllocations not_ours;
    MPI_Op made;
    MPI_Op_create(&bfloat16_sum, /*commute=*/1, &made);
    return made;
  }();
  return op;
}

void add_bfloat16(void* sum, const void* addend, int64_t count) {
  auto* out = static_cast<c10::BFloat16*>(sum);
  const auto* in = static_cast<const c10::BFloat16*>(addend);
  for (int64_t i = 0; i < count; ++i) out[i] = c10::BFloat16(static_cast<float>(out[i]) + static_cast<float>(in[i]));
}

}  // namespace mpibert
