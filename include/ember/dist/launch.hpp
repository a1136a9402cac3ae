// How this process was launched: its rank, the world size and its local rank (which GPU it
// drives), read from the launcher's environment variables.
//
//   mpirun / mpiexec (Open MPI)   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//   OMPI_COMM_WORLD_LOCAL_RANK Slurm's srun                  SLURM_PROCID, SLURM_NTASKS,
//   SLURM_LOCALID torchrun / Kubeflow style     RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
//   MASTER_PORT none of these                 a single process: rank 0 of 1
//
// Checked in that order: the first launcher whose variables are present wins. Values that are
// not integers, a rank outside [0, world size) or a missing partner variable are an Error that
// names the variable.
#pragma once

#include <functional>
#include <string>

namespace ember::dist {

struct Launch {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string launcher = "single";  // "mpirun", "slurm", "env" or "single"
  // The env style's rendezvous point for the NCCL unique id (no MPI needed).
  std::string master_addr;
  int master_port = 0;
};

// From the process environment.
Launch detect_launch();
// From `getenv` (returns nullptr for an unset variable): for tests.
Launch detect_launch(const std::function<const char*(const char*)>& getenv);

}  // namespace ember::dist
