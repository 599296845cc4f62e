#include "moetrace/cuda/launch_env.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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

}  // namespace

std::optional<LaunchEnv> parse_launch_env(const GetEnv& getenv) {
  const char* rank_var = nullptr;
  const char* size_var = nullptr;
  const char* local_var = nullptr;
  LaunchEnv env;
  if (getenv("OMPI_COMM_WORLD_RANK") != nullptr || getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    rank_var = "OMPI_COMM_WORLD_RANK";
    size_var = "OMPI_COMM_WORLD_SIZE";
    local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
    env.launcher = "mpirun";
  } else if (getenv("RANK") != nullptr || getenv("WORLD_SIZE") != nullptr) {
    rank_var = "RANK";
    size_var = "WORLD_SIZE";
    local_var = "LOCAL_RANK";
    env.launcher = "env";
  } else {
    return std::nullopt;
  }
  env.rank = *get_int(getenv, rank_var, true);
  env.world_size = *get_int(getenv, size_var, true);
  env.local_rank = get_int(getenv, local_var, false).value_or(env.rank);
  if (env.world_size < 1)
    throw ConfigError(fmt::format("{} ({}) must be at least 1", size_var, env.world_size));
  if (env.rank < 0 || env.rank >= env.world_size)
    throw ConfigError(fmt::format("{} ({}) must be in [0, {}) ({} is {})", rank_var, env.rank,
                                  env.world_size, size_var, env.world_size));
  if (env.local_rank < 0)
    throw ConfigError(fmt::format("{} ({}) must not be negative", local_var, env.local_rank));
  for (const char* job : {"MOETRACE_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID",
                          "SLURM_JOB_ID"}) {
    const char* v = getenv(job);
    if (v != nullptr && *v != '\0') {
      env.job_id = v;
      break;
    }
  }
  return env;
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
