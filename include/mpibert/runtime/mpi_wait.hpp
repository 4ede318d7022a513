// Waiting on an MPI request within the collective timeout (host_collectives.cpp), for the layers
// that post MPI requests of their own (the NCCL backend's unique-id broadcast).
#pragma once

#include <mpi.h>

#include <string>

namespace mpibert {

// Polls `request` to completion; past the collective timeout, reports `what` and ends the job.
void wait_for(MPI_Request& request, const std::string& what);

}  // namespace mpibert
