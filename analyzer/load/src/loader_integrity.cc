// A trace file checked against its writer's integrity record, and its references
// (trace_loader.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "trace_loader.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/projection.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"

namespace moetrace::analyzer {

void TraceLoader::load_integrity_record() {
  auto st = db_.prepare("SELECT value FROM meta WHERE key = 'integrity'");
  if (!st.step()) {
    trace_.run.integrity = "not recorded";
    return;
  }
  record_ = schema::parse_integrity(st.text(0));
  if (!record_) throw Error(trace_.run.path + ": the integrity record in meta is damaged; damaged trace");
  trace_.run.integrity = "verified";
}

void TraceLoader::verify(std::string_view table) {
  if (!record_) return;
  const auto& got = read_[std::string(table)];
  const auto it = record_->find(table);
  if (it == record_->end())
    throw Error(fmt::format("{}: the integrity record lacks table {}; damaged trace", trace_.run.path, table));
  if (it->second.rows != got.rows)
    throw Error(fmt::format("{}: table {} is damaged: {} rows read, the writer recorded {}", trace_.run.path,
                            table, got.rows, it->second.rows));
  if (it->second.sum != got.sum)
    throw Error(fmt::format("{}: table {} is damaged: its rows differ from those the writer recorded",
                            trace_.run.path, table));
}

void TraceLoader::check_references() {
  auto& t = trace_;
  std::sort(unknown_streams_.begin(), unknown_streams_.end());
  note_damage(static_cast<std::int64_t>(unknown_streams_.size()),
              "stream id(s) named by events are missing from table streams (the events are shown on "
              "streams named \"stream <id>\")");
  std::vector<std::int64_t> buffer_ids;
  for (const auto& b : t.buffers) buffer_ids.push_back(b.id.value);
  std::sort(buffer_ids.begin(), buffer_ids.end());
  const auto has_buffer = [&](BufferId b) { return std::binary_search(buffer_ids.begin(), buffer_ids.end(), b.value); };
  const auto dangling_deps = std::erase_if(t.op_deps, [&](const OpDep& d) {
    return t.op_index(d.op) < 0 || t.op_index(d.dep) < 0;
  });
  note_damage(static_cast<std::int64_t>(dangling_deps),
              "dependencies in op_ranges.deps name ops that op_ranges lacks (left out)");
  for (const auto& l : t.op_buffers)
    checked_enum(static_cast<std::int64_t>(l.access), 1, 3, "op_ranges.buffers", "access");
  if (options_.memory) {
    const auto dangling = std::erase_if(t.op_buffers, [&](const OpBuffer& l) {
      return t.op_index(l.op) < 0 || !has_buffer(l.buffer);
    });
    note_damage(static_cast<std::int64_t>(dangling),
                "buffer accesses in op_ranges.buffers name buffers or ops that the trace lacks (left out)");
    std::int64_t events = 0;
    for (auto& e : t.memory_events)
      if (e.buffer.valid() && !has_buffer(e.buffer)) {
        e.buffer = BufferId();
        ++events;
      }
    note_damage(events, "memory_events rows name buffers that table buffers lacks (their buffer left out)");
  }
  if (options_.nvtx) {
    std::vector<std::int64_t> ids;
    for (const auto& r : t.nvtx) ids.push_back(r.id);
    std::sort(ids.begin(), ids.end());
    std::int64_t ops = 0;
    for (auto& op : t.ops)
      if (op.nvtx_id >= 0 && !std::binary_search(ids.begin(), ids.end(), op.nvtx_id)) {
        op.nvtx_id = -1;
        ++ops;
      }
    note_damage(ops, "op_ranges rows name NVTX ranges that nvtx_ranges lacks (their range left out)");
  }
  note_damage(activities_without_op_,
              "kernels, memcpy or memset rows name ops that op_ranges lacks (left unattributed)");
}

}  // namespace moetrace::analyzer
