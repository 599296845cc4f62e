// NCCL with one process per GPU: the test spawns two copies of this binary as
// ranks 0 and 1 (RANK / WORLD_SIZE / LOCAL_RANK, unique id through a file),
// each runs its half of a DPMoE plan, and both must match the float64
// reference. Needs two GPUs (NCCL refuses two ranks on one GPU); skips
// otherwise. Label `gpu`.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "moetrace/plan/builders.h"
#include "variant_plans.h"

extern char** environ;

namespace moetrace::cuda {
namespace {

plan::ModelShape shape() {
  return {.num_layers = 2, .num_experts = 4, .top_k = 2, .model_dim = 16, .expert_hidden = 24, .dense_hidden = 12,
          .learning_rate = 0.05};
}

// One rank's part (runs in a spawned process).
TEST(GpuNccl, Worker) {
  if (std::getenv("MOETRACE_NCCL_TEST_WORKER") == nullptr) GTEST_SKIP() << "runs as a spawned rank only";
  const auto f = testing::make_gpu_fixture(shape(), 2, {23, 15}, 77);
  plan::DpMoeConfig c;
  c.common = testing::common_config(f.shape, 2, 2);
  const plan::Plan p = plan::build_dpmoe(c, f.ref.load);
  ExecutorOptions o;
  o.precision = Precision::kFp32;
  o.communicator = CommunicatorKind::kNccl;
  o.capture_results = true;
  Executor ex(p, o);
  const RunResult r = ex.run(f.weights, f.data);
  EXPECT_EQ(r.routing_mismatches, 0);
  int compared = 0;
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    if (r.outputs[i].rows == 0) continue;  // another rank's block
    EXPECT_LE(plan::relative_error(r.outputs[i], f.ref.outputs[i]), 1e-5) << "output " << i;
    EXPECT_LE(plan::relative_error(r.input_grads[i], f.ref.input_grads[i]), 1e-5) << "input grad " << i;
    ++compared;
  }
  EXPECT_EQ(compared, 2);  // this rank's block in each of 2 iterations
  for (const auto& cp : r.final_params)
    EXPECT_LE(plan::relative_error(cp.value, plan::param_slice(f.ref.final_weights, cp.slice)), 1e-5);
}

TEST(GpuNccl, TwoProcessesMatchTheReference) {
  MOETRACE_REQUIRE_GPU();
  if (probe_devices().size() < 2) GTEST_SKIP() << "needs two GPUs (NCCL refuses two ranks on one GPU)";
  const std::string id_file =
      (std::filesystem::temp_directory_path() / ("moetrace_nccl_test_" + std::to_string(getpid()) + ".id")).string();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    env_strings.push_back("MOETRACE_NCCL_TEST_WORKER=1");
    env_strings.push_back("RANK=" + std::to_string(rank));
    env_strings.push_back("WORLD_SIZE=2");
    env_strings.push_back("LOCAL_RANK=" + std::to_string(rank));
    env_strings.push_back("MOETRACE_NCCL_ID_FILE=" + id_file);
    env_strings.push_back("MOETRACE_JOB_ID=test" + std::to_string(getpid()));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string filter = "--gtest_filter=GpuNccl.Worker";
    char* argv[] = {self.data(), filter.data(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank process " << pid << " failed";
  }
  std::filesystem::remove(id_file);
}

}  // namespace
}  // namespace moetrace::cuda
