#include "moetrace/cuda/launch_env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

std::optional<int> get_int(const GetEnv& getenv, const char* name, bool required_if_others) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required_if_others) throw ConfigError(fmt::format("{} is not set", name));
    return std::nullopt;
  }
  int out = 0;
  const char* end = v + std::char_traits<char>::length(v);
  auto [p, ec] = std::from_chars(v, end, out);
  if (ec != std::errc() || p != end)
    throw ConfigError(fmt::format("{} ({}) is not an integer", name, v));
  return out;
}

std::string token(std::string s) {
  for (char& c : s)
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = '_';
  return s.empty() ? std::string("-") : s;
}

// One launcher's variables. The first launcher whose rank variable (or, for
// mpirun and torchrun, size variable) is set describes the process.
struct Launcher {
  const char* name;
  const char* rank_var;
  std::vector<const char*> size_vars;   // the first one set
  std::vector<const char*> local_vars;  // the first one set; else the rank
  bool size_detects;                    // a set size variable alone selects it
};

const char* first_set(const GetEnv& getenv, const std::vector<const char*>& vars) {
  for (const char* v : vars) {
    const char* x = getenv(v);
    if (x != nullptr && *x != '\0') return v;
  }
  return nullptr;
}

// Order: mpirun's variables win over torchrun's (a stale RANK in a shell must
// not override mpirun); torchrun's win over PMIx, PMI and Slurm, which then
// describe the torchrun agent, not its workers; PMIx and PMI win over Slurm,
// whose SLURM_PROCID under `srun --mpi=...` or a hydra proxy started by srun
// numbers nodes or agrees with them.
const std::vector<Launcher>& launchers() {
  static const std::vector<Launcher> all = {
      {"mpirun", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}, {"OMPI_COMM_WORLD_LOCAL_RANK"}, true},
      {"env", "RANK", {"WORLD_SIZE"}, {"LOCAL_RANK"}, true},
      // PMIx puts only the rank (and namespace) in the environment; the size
      // comes from the resource manager that started it.
      {"pmix", "PMIX_RANK", {"SLURM_NTASKS", "PMI_SIZE"}, {"SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}, false},
      // PMI-1/PMI-2: MPICH and Intel MPI's hydra (MPI_LOCALRANKID), Cray PALS
      // (PMI_LOCAL_RANK), `srun --mpi=pmi2` (SLURM_LOCALID).
      {"pmi", "PMI_RANK", {"PMI_SIZE"}, {"MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"}, false},
      {"slurm", "SLURM_PROCID", {"SLURM_NTASKS"}, {"SLURM_LOCALID"}, false},
  };
  return all;
}

bool set(const GetEnv& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0';
}

// Slurm's variables count only in a task that srun started: the batch script
// itself also sees SLURM_PROCID=0 and the job's SLURM_NTASKS, but is no task
// of a step (srun sets SLURM_STEP_ID for its tasks).
bool applies(const Launcher& l, const GetEnv& getenv) {
  if (std::string_view(l.name) == "slurm" && !set(getenv, "SLURM_STEP_ID")) return false;
  if (getenv(l.rank_var) != nullptr) return true;
  return l.size_detects && getenv(l.size_vars.front()) != nullptr;
}

}  // namespace

std::string launch_job_id(const GetEnv& getenv) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  if (std::string v = get("MOETRACE_JOB_ID"); !v.empty()) return v;
  if (std::string v = get("OMPI_MCA_ess_base_jobid"); !v.empty()) return v;
  if (std::string v = get("PMIX_NAMESPACE"); !v.empty()) return v;
  // torchrun: the rendezvous id (its default, "none", names no job), and the
  // restart count, since a restarted group keeps the run id.
  if (std::string v = get("TORCHELASTIC_RUN_ID"); !v.empty() && v != "none") {
    const std::string restart = get("TORCHELASTIC_RESTART_COUNT");
    return restart.empty() ? v : v + ".r" + restart;
  }
  // Slurm: the job and the step (several sruns of one job share the job id).
  if (std::string v = get("SLURM_JOB_ID"); !v.empty()) {
    const std::string step = get("SLURM_STEP_ID");
    return step.empty() ? v : v + "." + step;
  }
  return {};
}

std::optional<LaunchEnv> parse_launch_env(const GetEnv& getenv) {
  const Launcher* launcher = nullptr;
  for (const Launcher& l : launchers())
    if (applies(l, getenv)) {
      launcher = &l;
      break;
    }
  if (launcher == nullptr) return std::nullopt;
  LaunchEnv env;
  env.launcher = launcher->name;
  const char* size_var = first_set(getenv, launcher->size_vars);
  if (size_var == nullptr) {
    if (launcher->size_vars.size() == 1) throw ConfigError(fmt::format("{} is not set", launcher->size_vars.front()));
    std::string names;
    for (const char* v : launcher->size_vars) names += names.empty() ? v : std::string(" nor ") + v;
    throw ConfigError(fmt::format("{} is set, but neither {} gives the world size", launcher->rank_var, names));
  }
  const char* rank_var = launcher->rank_var;
  env.rank = *get_int(getenv, rank_var, true);
  env.world_size = *get_int(getenv, size_var, true);
  const char* local_var = first_set(getenv, launcher->local_vars);
  if (local_var == nullptr) local_var = launcher->local_vars.front();
  env.local_rank = get_int(getenv, local_var, false).value_or(env.rank);
  if (env.world_size < 1)
    throw ConfigError(fmt::format("{} ({}) must be at least 1", size_var, env.world_size));
  if (env.rank < 0 || env.rank >= env.world_size)
    throw ConfigError(fmt::format("{} ({}) must be in [0, {}) ({} is {})", rank_var, env.rank,
                                  env.world_size, size_var, env.world_size));
  if (env.local_rank < 0)
    throw ConfigError(fmt::format("{} ({}) must not be negative", local_var, env.local_rank));
  env.job_id = launch_job_id(getenv);
  return env;
}

void check_unique_id_job(const LaunchEnv& env) {
  if (env.world_size > 1 && env.job_id.empty())
    throw ConfigError(fmt::format(
        "NCCL with {} ranks needs an id of this job, so that a unique-id file left by an earlier run "
        "is not taken for this one's, and the launcher ({}) sets none: set MOETRACE_JOB_ID to a value "
        "unique to this run in every rank's environment",
        env.world_size, env.launcher));
}

std::optional<LaunchEnv> launch_env_from_process() {
  return parse_launch_env([](const char* name) { return std::getenv(name); });
}

std::string format_unique_id_line(const std::string& job_id, const std::vector<std::uint8_t>& id) {
  std::string hex;
  hex.reserve(id.size() * 2);
  for (std::uint8_t b : id) hex += fmt::format("{:02x}", b);
  return fmt::format("moetrace-nccl-id v1 {} {}\n", token(job_id), hex);
}

std::optional<std::vector<std::uint8_t>> parse_unique_id_line(const std::string& line,
                                                              const std::string& job_id,
                                                              std::size_t size) {
  std::istringstream in(line);
  std::string magic, version, job, hex;
  if (!(in >> magic >> version >> job >> hex)) return std::nullopt;
  if (magic != "moetrace-nccl-id" || version != "v1" || job != token(job_id)) return std::nullopt;
  if (hex.size() != 2 * size) return std::nullopt;
  std::vector<std::uint8_t> id(size);
  for (std::size_t i = 0; i < size; ++i) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, v, 16);
    if (ec != std::errc() || p != hex.data() + 2 * i + 2) return std::nullopt;
    id[i] = static_cast<std::uint8_t>(v);
  }
  return id;
}

void write_unique_id_file(const std::string& path, const std::string& job_id,
                          const std::vector<std::uint8_t>& id) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << format_unique_id_line(job_id, id);
    out.flush();
    if (!out) throw Error(fmt::format("cannot write the NCCL unique id file {}", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(fmt::format("cannot move the NCCL unique id file into place at {}", path));
  }
}

std::vector<std::uint8_t> read_unique_id_file(const std::string& path, const std::string& job_id,
                                              std::size_t size, IdFileWait wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait.timeout;
  bool seen_other = false;
  for (;;) {
    std::ifstream in(path);
    if (in) {
      std::string line;
      std::getline(in, line);
      if (auto id = parse_unique_id_line(line, job_id, size)) return *id;
      seen_other = true;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(wait.poll);
  }
  const double seconds = std::chrono::duration<double>(wait.timeout).count();
  throw Error(fmt::format(
      "timed out after {:g} s waiting for rank 0 to write the NCCL unique id to {} ({}; every rank "
      "must see the same path: set MOETRACE_NCCL_ID_FILE to a file on a shared file system)",
      seconds, path,
      seen_other ? fmt::format("the file there is not one of job '{}'", token(job_id))
                 : std::string("no such file")));
}

std::string unique_id_path(const std::string& option, const GetEnv& getenv) {
  if (!option.empty()) return option;
  const char* v = getenv("MOETRACE_NCCL_ID_FILE");
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace moetrace::cuda
