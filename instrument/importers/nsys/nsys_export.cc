// The prescan of an Nsight Systems export (nsys_export.h).
#include "nsys_export.h"

namespace moetrace::importers::nsys {

std::set<std::int64_t> cuda_pids(ExportFile& f) {
  std::set<std::int64_t> pids;
  auto collect = [&](const char* table, const char* column) {
    if (!f.has(table, column)) return;
    auto st = f.db().prepare(std::string("SELECT DISTINCT ") + column + " FROM " + table +
                             " WHERE " + column + " IS NOT NULL");
    while (st.step()) pids.insert(pid_of(st.int64(0)));
  };
  collect(kKernel, "globalPid");
  collect(kMemcpy, "globalPid");
  collect(kMemset, "globalPid");
  collect(kSync, "globalPid");
  collect(kRuntime, "globalTid");
  collect(kMemory, "globalPid");
  return pids;
}

std::set<std::int64_t> nvtx_pids(ExportFile& f) {
  std::set<std::int64_t> pids;
  if (!f.has(kNvtx, "globalTid")) return pids;
  auto st = f.db().prepare(
      "SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE globalTid IS NOT NULL AND eventType IN (59, 60)");
  while (st.step()) pids.insert(pid_of(st.int64(0)));
  return pids;
}

// MPI tracing in nsys names the rank's main thread "MPI Rank N" (ThreadNames,
// and NVTX thread-name events); that is the only rank number an export holds.
std::map<std::int64_t, int> mpi_rank_names(ExportFile& f) {
  std::map<std::int64_t, int> ranks;
  auto note = [&](std::int64_t global_tid, std::string_view name) {
    constexpr std::string_view prefix = "MPI Rank ";
    if (name.substr(0, prefix.size()) != prefix) return;
    const auto digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 7) return;
    int rank = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return;
      rank = rank * 10 + (c - '0');
    }
    ranks[pid_of(global_tid)] = rank;
  };
  if (f.has("ThreadNames", "nameId") && f.has("ThreadNames", "globalTid")) {
    auto st = f.db().prepare("SELECT globalTid, nameId FROM ThreadNames WHERE globalTid IS NOT NULL");
    while (st.step()) note(st.int64(0), f.str(st.int64(1)));
  }
  if (f.has(kNvtx, "globalTid")) {
    auto st = f.db().prepare("SELECT globalTid, " + f.col(kNvtx, "text") + ", " +
                             f.col(kNvtx, "textId") +
                             " FROM NVTX_EVENTS WHERE eventType = 39 AND globalTid IS NOT NULL");
    while (st.step()) note(st.int64(0), st.is_null(1) ? f.str(st.int64(2)) : st.text(1));
  }
  return ranks;
}

std::map<std::int64_t, std::string> process_names(ExportFile& f) {
  std::map<std::int64_t, std::string> names;
  if (!f.has("PROCESSES", "pid") || !f.has("PROCESSES", "name")) return names;
  auto st = f.db().prepare("SELECT pid, name FROM PROCESSES WHERE pid IS NOT NULL");
  while (st.step()) names[st.int64(0)] = st.text(1);
  return names;
}

}  // namespace moetrace::importers::nsys
