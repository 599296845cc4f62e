// estimated_merged_bytes() (run_by_file.h): the memory of a run read
// together, from what its files hold.
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include "moetrace/analyzer/run_by_file.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"

namespace moetrace::analyzer {
namespace {

// The size of a gzip file's content: its last member's ISIZE (RFC 1952: the
// uncompressed length modulo 2^32), or `compressed` x 8 where that is smaller
// than the file itself (over 4 GiB, or several members).
double gzip_content_bytes(const std::string& path, std::uintmax_t compressed) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[4] = {};
  if (compressed >= 18 && in.seekg(-4, std::ios::end) && in.read(reinterpret_cast<char*>(b), 4)) {
    const auto isize = std::uint32_t{b[0]} | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 |
                       std::uint32_t{b[3]} << 24;
    if (isize >= compressed) return static_cast<double>(isize);
  }
  return static_cast<double>(compressed) * 8.0;
}

// Tables whose rows become events or per-event records in memory.
constexpr std::string_view kEventTables[] = {
    "kernels",     "memcpy",          "memset",        "api_calls",   "nvtx_ranges", "autograd_ranges",
    "op_ranges",   "op_recv_bytes",   "memory_events", "buffers",     "collectives", "input_shapes"};
constexpr std::string_view kLoadTables[] = {"expert_load", "expert_placement"};

// A moetrace trace's estimate from its row counts; -1 where it cannot be
// opened (the loader will say why).
double trace_file_bytes(const std::string& path) {
  try {
    auto db = schema::open_trace(path);
    std::optional<schema::IntegrityRecord> record;
    if (auto st = db.prepare("SELECT value FROM meta WHERE key = 'integrity'"); st.step())
      record = schema::parse_integrity(st.text(0));
    auto rows = [&](std::string_view table) -> double {
      if (record) {
        const auto it = record->find(table);
        return it != record->end() ? static_cast<double>(it->second.rows) : 0.0;
      }
      const std::string name(table);
      return db.has_table(name) ? static_cast<double>(db.query_int("SELECT count(*) FROM " + name).value_or(0)) : 0.0;
    };
    double events = 0, load = 0;
    for (auto t : kEventTables) events += rows(t);
    for (auto t : kLoadTables) load += rows(t);
    const double ranks = static_cast<double>(
        db.query_int("SELECT count(*) FROM (SELECT rank FROM ranks UNION SELECT rank FROM streams)").value_or(1));
    return events * kMergedBytesPerEventRow + load * kMergedBytesPerLoadRow + ranks * kMergedBytesPerRank;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::int64_t estimated_merged_bytes(const std::vector<std::string>& paths) {
  double bytes = 0;
  bool any = false;
  for (const auto& p : paths) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(p, ec);
    if (ec) continue;
    double b = -1;
    if (p.ends_with(".json.gz")) b = gzip_content_bytes(p, size) * kMergedBytesPerJsonByte;
    else if (p.ends_with(".json")) b = static_cast<double>(size) * kMergedBytesPerJsonByte;
    else b = trace_file_bytes(p);  // an Nsight Systems export: -1
    if (b < 0) b = static_cast<double>(size) * kMergedBytesPerFileByte;
    bytes += b;
    any = true;
  }
  return any ? static_cast<std::int64_t>(bytes + kMergedBaseBytes) : 0;
}

}  // namespace moetrace::analyzer
