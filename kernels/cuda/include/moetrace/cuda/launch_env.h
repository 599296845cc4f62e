// How a process of a multi-GPU run learns its place (no CUDA here, so it is
// unit-tested on any machine): the launcher's environment (mpirun's
// OMPI_COMM_WORLD_*, torchrun-style RANK / WORLD_SIZE / LOCAL_RANK, PMIx's
// PMIX_RANK, PMI's PMI_RANK / PMI_SIZE, srun's SLURM_PROCID / SLURM_NTASKS /
// SLURM_LOCALID) and the NCCL unique id handshake through a file that rank 0
// writes and the other ranks poll.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace moetrace::cuda {

struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  // "mpirun", "env" (RANK/WORLD_SIZE/LOCAL_RANK), "pmix", "pmi" or "slurm".
  std::string launcher;
  // Identifies this job so a unique-id file left by an earlier run is not
  // taken for this one (launch_job_id); may be empty.
  std::string job_id;
};

using GetEnv = std::function<const char*(const char*)>;

// The launch environment, or nullopt where no launcher variable is set (a
// single-process run). The first launcher that applies, in this order:
//   mpirun  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   env     RANK, WORLD_SIZE, LOCAL_RANK (torchrun)
//   pmix    PMIX_RANK; size SLURM_NTASKS or PMI_SIZE (PMIx itself gives it
//           only through its API); local SLURM_LOCALID, MPI_LOCALRANKID or PMI_LOCAL_RANK
//   pmi     PMI_RANK, PMI_SIZE; local MPI_LOCALRANKID, PMI_LOCAL_RANK or SLURM_LOCALID
//   slurm   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, only in a task srun
//           started (SLURM_STEP_ID set; a batch script is no task)
// Throws moetrace::ConfigError naming the variable where one is malformed or
// out of range (e.g. "RANK (4) must be in [0, 4) (WORLD_SIZE is 4)"). The
// local rank defaults to the rank where absent.
std::optional<LaunchEnv> parse_launch_env(const GetEnv& getenv);
std::optional<LaunchEnv> launch_env_from_process();

// This job's id: MOETRACE_JOB_ID, else OMPI_MCA_ess_base_jobid (mpirun),
// PMIX_NAMESPACE, TORCHELASTIC_RUN_ID (not its default "none") with ".r" and
// TORCHELASTIC_RESTART_COUNT, SLURM_JOB_ID with "." and SLURM_STEP_ID; else
// empty (MPICH's hydra, PMI without Slurm, torchrun's static rendezvous).
std::string launch_job_id(const GetEnv& getenv);

// Throws moetrace::ConfigError where a run of several ranks has no job id:
// without one, rank 0's unique-id file cannot be told from one an earlier
// run left at the same path, and ranks that read that one hang in NCCL's
// init.
void check_unique_id_job(const LaunchEnv& env);

// The unique-id file: one text line "moetrace-nccl-id v1 <job> <hex bytes>".
// Written to `path + ".tmp.<pid>"` and renamed, so a reader never sees half a
// file. Throws moetrace::Error where the file cannot be written.
void write_unique_id_file(const std::string& path, const std::string& job_id,
                          const std::vector<std::uint8_t>& id);

struct IdFileWait {
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds poll{20};
};

// Polls `path` until it holds an id of `size` bytes for `job_id` (a file of
// another job is ignored as stale, a malformed one too, until the timeout).
// Throws moetrace::Error on timeout: "timed out after 60 s waiting for rank 0
// to write the NCCL unique id to <path> (...)".
std::vector<std::uint8_t> read_unique_id_file(const std::string& path, const std::string& job_id,
                                              std::size_t size, IdFileWait wait = {});

// Parses one id line; nullopt where it is not a well-formed line of `job_id`.
std::optional<std::vector<std::uint8_t>> parse_unique_id_line(const std::string& line,
                                                              const std::string& job_id,
                                                              std::size_t size);
std::string format_unique_id_line(const std::string& job_id, const std::vector<std::uint8_t>& id);

// Where the id file goes: `option` where given, else $MOETRACE_NCCL_ID_FILE,
// else empty (the caller reports that it is needed for world_size > 1).
std::string unique_id_path(const std::string& option, const GetEnv& getenv);

}  // namespace moetrace::cuda
