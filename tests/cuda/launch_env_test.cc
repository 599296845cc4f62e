#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "moetrace/cuda/device_probe.h"
#include "moetrace/cuda/launch_env.h"
#include "moetrace/schema/error.h"
#include "error_of.h"
#include "expect_named.h"

namespace moetrace::cuda {
namespace {

GetEnv env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::string config_error(const GetEnv& e) {
  return moetrace::testing::error_of<ConfigError>([&] { parse_launch_env(e); });
}

// A process the launcher `launcher` started: its rank of world_size, and
// its rank on its node.
void expect_process(const LaunchEnv& e, const char* launcher, int rank, int world_size, int local_rank) {
  EXPECT_EQ(e.launcher, launcher);
  EXPECT_EQ(e.rank, rank);
  EXPECT_EQ(e.world_size, world_size);
  EXPECT_EQ(e.local_rank, local_rank);
}

TEST(LaunchEnv, NoLauncherIsASingleProcess) { EXPECT_FALSE(parse_launch_env(env({})).has_value()); }

// A process a launcher started, from the launcher's variables: the launcher,
// the process's rank of world_size, its rank on its node and its job (not
// checked where nullopt).
struct Launched {
  const char* name;
  std::map<std::string, std::string> vars;
  const char* launcher;
  int rank, world_size, local_rank;
  std::optional<std::string> job_id;
};
void PrintTo(const Launched& l, std::ostream* os) { *os << l.name; }

const Launched kLaunched[] = {
    // Open MPI's variables win over torchrun's.
    {"Mpirun",
     {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
      {"OMPI_MCA_ess_base_jobid", "4242"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}},
     "mpirun", 3, 8, 1, "4242"},
    // The local rank defaults to RANK.
    {"TorchrunStyle", {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MOETRACE_JOB_ID", "run 7"}}, "env", 2, 4, 2, "run 7"},
    // Two sruns of one job are two jobs here: job and step.
    {"SrunTask",
     {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "123"},
      {"SLURM_STEP_ID", "2"}},
     "slurm", 5, 8, 1, "123.2"},
    // srun starts one torchrun agent per node; its workers carry RANK.
    {"TorchrunUnderSrunIsTheWorker",
     {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "9"}, {"RANK", "6"},
      {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"}},
     "env", 6, 8, 2, std::nullopt},
};

class LaunchedProcess : public ::testing::TestWithParam<Launched> {};

TEST_P(LaunchedProcess, RankWorldSizeAndJob) {
  const auto& p = GetParam();
  const auto e = parse_launch_env(env(p.vars));
  ASSERT_TRUE(e.has_value());
  expect_process(*e, p.launcher, p.rank, p.world_size, p.local_rank);
  moetrace::testing::expect_named(p.job_id, e->job_id, "job_id");
}

INSTANTIATE_TEST_SUITE_P(LaunchEnv, LaunchedProcess, ::testing::ValuesIn(kLaunched),
                         [](const ::testing::TestParamInfo<Launched>& i) { return std::string(i.param.name); });

TEST(LaunchEnv, BadValuesNameTheVariable) {
  EXPECT_EQ(config_error(env({{"RANK", "x"}, {"WORLD_SIZE", "2"}})), "RANK (x) is not an integer");
  EXPECT_EQ(config_error(env({{"RANK", "2"}, {"WORLD_SIZE", "2"}})),
            "RANK (2) must be in [0, 2) (WORLD_SIZE is 2)");
  EXPECT_EQ(config_error(env({{"RANK", "0"}})), "WORLD_SIZE is not set");
  EXPECT_EQ(config_error(env({{"RANK", "0"}, {"WORLD_SIZE", "0"}})), "WORLD_SIZE (0) must be at least 1");
  EXPECT_EQ(config_error(env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}})),
            "OMPI_COMM_WORLD_LOCAL_RANK (-1) must not be negative");
}

TEST(LaunchEnv, SlurmBatchScriptIsASingleProcess) {
  // sbatch's script sees SLURM_PROCID=0 and the job's task count but is no
  // task of a step: it must not wait for seven other ranks.
  EXPECT_FALSE(parse_launch_env(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"},
                                     {"SLURM_JOB_ID", "123"}}))
                   .has_value());
}

TEST(LaunchEnv, PmiVariables) {
  // MPICH / Intel MPI hydra.
  auto e = parse_launch_env(env({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}}));
  ASSERT_TRUE(e.has_value());
  expect_process(*e, "pmi", 3, 4, 3);
  EXPECT_EQ(e->job_id, "");  // hydra names no job
  // Cray PALS.
  e = parse_launch_env(env({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"PMI_LOCAL_RANK", "1"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->local_rank, 1);
  // PMI wins over the Slurm step that started it.
  e = parse_launch_env(env({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"},
                            {"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "0"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "pmi");
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(config_error(env({{"PMI_RANK", "2"}})), "PMI_SIZE is not set");
}

TEST(LaunchEnv, PmixVariables) {
  auto e = parse_launch_env(env({{"PMIX_RANK", "7"}, {"PMIX_NAMESPACE", "slurm.pmix.55.0"}, {"SLURM_NTASKS", "16"},
                                 {"SLURM_LOCALID", "3"}, {"SLURM_PROCID", "7"}, {"SLURM_STEP_ID", "0"}}));
  ASSERT_TRUE(e.has_value());
  expect_process(*e, "pmix", 7, 16, 3);
  EXPECT_EQ(e->job_id, "slurm.pmix.55.0");
  EXPECT_EQ(config_error(env({{"PMIX_RANK", "0"}})),
            "PMIX_RANK is set, but neither SLURM_NTASKS nor PMI_SIZE gives the world size");
  EXPECT_EQ(config_error(env({{"PMIX_RANK", "x"}, {"PMI_SIZE", "2"}})), "PMIX_RANK (x) is not an integer");
}

TEST(LaunchEnv, JobIdNamesOneRunOnly) {
  EXPECT_EQ(launch_job_id(env({{"MOETRACE_JOB_ID", "mine"}, {"SLURM_JOB_ID", "1"}})), "mine");
  // torchrun's default rendezvous id is the same for every run.
  EXPECT_EQ(launch_job_id(env({{"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_RESTART_COUNT", "0"}})), "");
  // A restarted worker group keeps the run id.
  EXPECT_EQ(launch_job_id(env({{"TORCHELASTIC_RUN_ID", "4f2a"}, {"TORCHELASTIC_RESTART_COUNT", "1"}})),
            "4f2a.r1");
  EXPECT_EQ(launch_job_id(env({{"SLURM_JOB_ID", "77"}})), "77");
  EXPECT_EQ(launch_job_id(env({{"PMIX_NAMESPACE", "prterun-host-1234@1"}})), "prterun-host-1234@1");
}

TEST(UniqueIdFile, SeveralRanksNeedAJobId) {
  LaunchEnv e;
  e.world_size = 1;
  EXPECT_NO_THROW(check_unique_id_job(e));  // one rank writes no file
  e.world_size = 4;
  e.launcher = "pmi";
  try {
    check_unique_id_job(e);
    FAIL() << "no error";
  } catch (const ConfigError& x) {
    const std::string m = x.what();
    EXPECT_NE(m.find("MOETRACE_JOB_ID"), std::string::npos) << m;
    EXPECT_NE(m.find("(pmi)"), std::string::npos) << m;
  }
  e.job_id = "j";
  EXPECT_NO_THROW(check_unique_id_job(e));
}

std::vector<std::uint8_t> some_id() {
  std::vector<std::uint8_t> id(128);
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<std::uint8_t>(i * 37 + 1);
  return id;
}

TEST(UniqueIdFile, LineRoundTripsAndChecksTheJob) {
  const auto id = some_id();
  const std::string line = format_unique_id_line("job 1", id);
  EXPECT_EQ(parse_unique_id_line(line, "job 1", 128), id);
  EXPECT_FALSE(parse_unique_id_line(line, "job 2", 128).has_value());
  EXPECT_FALSE(parse_unique_id_line(line, "job 1", 64).has_value());
  EXPECT_FALSE(parse_unique_id_line("moetrace-nccl-id v1 - zz", "", 1).has_value());
  EXPECT_FALSE(parse_unique_id_line("garbage", "", 1).has_value());
  EXPECT_TRUE(parse_unique_id_line(format_unique_id_line("", {7}), "", 1).has_value());
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("moetrace_id_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

TEST(UniqueIdFile, ReaderWaitsForTheWriter) {
  TempDir dir;
  const std::string path = (dir.path / "nccl.id").string();
  const auto id = some_id();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    write_unique_id_file(path, "j", id);
  });
  const auto got = read_unique_id_file(path, "j", 128, {std::chrono::milliseconds(10000), std::chrono::milliseconds(5)});
  writer.join();
  EXPECT_EQ(got, id);
  // No temporary file left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(UniqueIdFile, TimeoutIsOneClearError) {
  TempDir dir;
  const std::string path = (dir.path / "missing.id").string();
  try {
    read_unique_id_file(path, "j", 128, {std::chrono::milliseconds(60), std::chrono::milliseconds(10)});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("timed out after 0.06 s waiting for rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("no such file"), std::string::npos) << m;
    EXPECT_NE(m.find("MOETRACE_NCCL_ID_FILE"), std::string::npos) << m;
  }
}

TEST(UniqueIdFile, StaleFileOfAnotherJobIsIgnored) {
  TempDir dir;
  const std::string path = (dir.path / "nccl.id").string();
  write_unique_id_file(path, "old-job", some_id());
  try {
    read_unique_id_file(path, "new-job", 128, {std::chrono::milliseconds(50), std::chrono::milliseconds(10)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not one of job 'new-job'"), std::string::npos) << e.what();
  }
  write_unique_id_file(path, "new-job", some_id());
  EXPECT_EQ(read_unique_id_file(path, "new-job", 128), some_id());
}

TEST(UniqueIdFile, PathFromOptionOrEnvironment) {
  EXPECT_EQ(unique_id_path("/a", env({{"MOETRACE_NCCL_ID_FILE", "/b"}})), "/a");
  EXPECT_EQ(unique_id_path("", env({{"MOETRACE_NCCL_ID_FILE", "/b"}})), "/b");
  EXPECT_EQ(unique_id_path("", env({})), "");
}

TEST(DeviceError, OneLinePerCause) {
  EXPECT_EQ(describe_device_error(100, "cudaErrorNoDevice", "no CUDA-capable device is detected"),
            "no CUDA GPU found (cudaErrorNoDevice: no CUDA-capable device is detected)");
  EXPECT_EQ(describe_device_error(35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient"),
            "no NVIDIA driver (cudaErrorInsufficientDriver: CUDA driver version is insufficient)");
  EXPECT_NE(describe_device_error(803, "cudaErrorSystemDriverMismatch", "x").find("does not match"),
            std::string::npos);
}

}  // namespace
}  // namespace moetrace::cuda
