// Kineto traces written by hand for the MoE recognition tests: ranges and
// kernels with their launches, imported and loaded as a user's trace would be.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "import_test_util.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/import.h"

namespace moetrace::testing {

// Kineto Chrome-trace JSON, timestamps in microseconds.
class Kineto {
 public:
  void range(const std::string& name, double ts, double dur, int tid = 1, const char* cat = "user_annotation",
             nlohmann::json args = nullptr) {
    nlohmann::json e = {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", 1}, {"tid", tid}, {"ts", ts}, {"dur", dur}};
    if (!args.is_null()) e["args"] = std::move(args);
    events_.push_back(std::move(e));
  }
  // A kernel on `stream` launched at host time `launch` from thread `tid`.
  void kernel(const std::string& name, int stream, double ts, double dur, double launch, int tid = 1,
              nlohmann::json extra = nlohmann::json::object()) {
    const int corr = next_corr_++;
    events_.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", tid},
                       {"ts", launch}, {"dur", 1}, {"args", {{"correlation", corr}}}});
    nlohmann::json args = {{"correlation", corr}, {"stream", stream}, {"device", 0}};
    args.update(extra);
    events_.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", 0}, {"tid", stream}, {"ts", ts},
                       {"dur", dur}, {"args", args}});
  }
  // A memset on `stream` launched by cudaMemsetAsync at host time `launch`.
  void memset(int stream, double ts, double dur, double launch, int tid = 1) {
    const int corr = next_corr_++;
    events_.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaMemsetAsync"}, {"pid", 1}, {"tid", tid},
                       {"ts", launch}, {"dur", 1}, {"args", {{"correlation", corr}}}});
    events_.push_back({{"ph", "X"}, {"cat", "gpu_memset"}, {"name", "Memset (Device)"}, {"pid", 0}, {"tid", stream},
                       {"ts", ts}, {"dur", dur}, {"args", {{"correlation", corr}, {"stream", stream}, {"device", 0}}}});
  }
  std::string write(const std::string& file, int rank = 0, int world = 1) const {
    const auto path = temp_path(file);
    nlohmann::json doc = {{"traceEvents", events_},
                          {"distributedInfo", {{"rank", rank}, {"world_size", world}, {"backend", "nccl"}}}};
    write_file(path, doc.dump());
    return path;
  }

 private:
  nlohmann::json events_ = nlohmann::json::array();
  int next_corr_ = 1;
};

inline analyzer::Trace import_and_load(const std::vector<std::string>& inputs, const std::string& out,
                                const std::string& rules = "") {
  importers::import_traces(inputs, out);
  analyzer::LoadOptions o;
  o.moe_rules = rules;
  return analyzer::load_trace(out, o);
}

inline const analyzer::OpRange& op_of_kernel(const analyzer::Trace& t, std::string_view kernel, double start_us) {
  for (const auto& a : t.activities)
    if (t.str(a.name) == kernel && a.start_ns == static_cast<std::int64_t>(start_us * 1000)) {
      EXPECT_GE(a.op, 0) << kernel;
      return t.ops.at(static_cast<std::size_t>(a.op));
    }
  ADD_FAILURE() << "no kernel " << kernel << " at " << start_us;
  static analyzer::OpRange none;
  return none;
}

// A phase's (or an iteration's) window and its time in each category named,
// in ns; the categories not named are not checked.
inline void expect_times(const analyzer::TimeSplit& s, std::int64_t window_ns,
                         std::initializer_list<std::pair<Category, std::int64_t>> at) {
  EXPECT_EQ(s.window_ns, window_ns);
  for (const auto& [c, ns] : at) EXPECT_EQ(s.at(c), ns) << "category " << static_cast<int>(c);
}

inline constexpr const char* kA2a = "ncclDevKernel_AllToAll_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";

}  // namespace moetrace::testing
