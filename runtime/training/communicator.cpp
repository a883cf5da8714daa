// Which communicator a trainer gets: the launcher's variables decide under distributed=auto.
#include "runtime/training/communicator.hpp"

#include <cstdlib>

#include "runtime/error.hpp"

namespace volt {

#ifdef VOLT_HAVE_MPI
std::unique_ptr<Communicator> open_mpi_communicator();  // mpi_communicator.cpp
#endif

bool launched_by_mpi_launcher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

std::unique_ptr<Communicator> open_communicator(const std::string& distributed) {
  if (distributed == "off" || (distributed == "auto" && !launched_by_mpi_launcher()))
    return nullptr;
#ifdef VOLT_HAVE_MPI
  return open_mpi_communicator();
#else
  fail(ErrorCode::InvalidArgument,
       std::string("training option distributed=") + distributed +
           (distributed == "auto" ? " (this process was started by mpirun)" : "") +
           ": this build of volt has no MPI (install libopenmpi-dev and rebuild); set "
           "distributed=off to train each process on its own");
#endif
}

}  // namespace volt
