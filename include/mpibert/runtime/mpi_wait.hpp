// Internal: waiting on an MPI request within the collective timeout (comm.cpp).
#pragma once

#include <mpi.h>

#include <string>

namespace mpibert {

// Polls `request` to completion; past the collective timeout, reports `what` and ends the job.
void wait_for(MPI_Request& request, const std::string& what);

}  // namespace mpibert
