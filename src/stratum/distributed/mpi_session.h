#pragma once
// MPI's lifetime as shared ownership. Every MPI and NCCL communicator holds
// the session; MPI_Finalize runs when the last of them is destroyed, so a
// program written the natural way (a DistContext made first, then the model
// and the engine, then return from main) finalizes after the engine's CUDA
// memory and NCCL communicators are gone, without calling finalize().
// distributed::finalize() stays allowed (it is idempotent).
#include <memory>

namespace stratum::distributed {

// The live session, or a new one; null when MPI is not initialized.
std::shared_ptr<void> mpi_session();

}  // namespace stratum::distributed
