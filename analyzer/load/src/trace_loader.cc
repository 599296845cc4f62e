#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <cmath>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/heap.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/projection.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "trace_loader.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"

namespace moetrace::analyzer {
void throw_empty_trace(const std::string& path) {
  throw Error(path + ": the trace holds no events (was the run empty, or killed before its first flush?)");
}

void TraceLoader::side_by_side(const std::function<void()>& first, const std::function<void()>& second) const {
  if (!read_in_parallel()) {
    first();
    second();
    return;
  }
  std::exception_ptr first_error, second_error;
  std::thread thread([&] {
    try {
      first();
    } catch (...) {
      first_error = std::current_exception();
    }
  });
  try {
    second();
  } catch (...) {
    second_error = std::current_exception();
  }
  thread.join();
  if (first_error) std::rethrow_exception(first_error);
  if (second_error) std::rethrow_exception(second_error);
}

void TraceLoader::in_two_halves(std::size_t n, const std::function<void(std::size_t, std::size_t)>& part) const {
  // Below this a thread costs more than it saves.
  constexpr std::size_t kWorthTwo = std::size_t{1} << 16;
  if (n < kWorthTwo) part(0, n);
  else side_by_side([&] { part(n / 2, n); }, [&] { part(0, n / 2); });
}

Trace TraceLoader::load() {
  if (imported_) take_imported();
  else read_tables();
  build_tracks();
  release_free_memory();  // heap.h: what reading the tables freed
  in_two_halves(trace_.activities.size(),
                [this](std::size_t begin, std::size_t end) { trace_.index_launching_calls(begin, end); });
  if (options_.recognize && trace_.ops.empty()) {
    progress("recognising MoE ops", 0.993);
    if (options_.moe_rules.empty()) {
      recognize_moe(trace_, builtin_moe_rules());
    } else {
      const auto user = load_moe_rules(options_.moe_rules);
      recognize_moe(trace_, combine_moe_rules(&user));
    }
  }
  check_references();
  if (options_.project) {
    progress("projecting", 0.995);
    project_activities(trace_);
  }
  if (trace_.activities.empty() && trace_.ops.empty() && trace_.api_calls.empty() &&
      trace_.nvtx.empty() && trace_.memory_events.empty())
    throw_empty_trace(trace_.run.path);
  progress("done", 1.0);
  return std::move(trace_);
}

void TraceLoader::read_tables() {
  load_run(db_, trace_.run, &read_);
  load_integrity_record();
  verify("run");
  verify("run_config");
  verify("meta");
  load_strings();
  load_devices_ranks_streams();
  if (options_.progress) count_rows();  // the total only scales the progress fraction
  read_event_tables();
  // Every table is read: the file's pages, mapped into memory as SQLite
  // read them (as large as the trace itself), go before the tracks are built.
  db_ = sqlite::Database();
}

void TraceLoader::load_run(sqlite::Database& db, RunInfo& run, schema::IntegrityRecord* digests) {
  run.schema_version = static_cast<int>(db.pragma_int("user_version").value_or(0));
  auto st = db.prepare("SELECT " + std::string(schema::kRunDigestColumns) + " FROM run WHERE id = 1");
  if (!st.step()) throw Error(run.path + ": the trace has no run record (damaged file?)");
  if (digests) (*digests)["run"].add_row(st, schema::kRunDigestColumnCount);
  run.name = st.text(0);
  run.backend = st.text(1);
  run.variant = st.text(2);
  run.simulated = st.int64(3) != 0;
  run.world_size = static_cast<int>(st.int64(4));
  run.host = st.text(5);
  run.moetrace_version = st.text(6);
  run.created_unix_s = st.int64(7);
  run.start_ns = st.int64_or(8, 0);
  run.end_ns = st.int64_or(9, 0);
  run.config_json = st.text(10);
  run.dropped_records = st.int64(11);
  auto meta = db.prepare(std::string(schema::kMetaDigestQuery));
  while (meta.step()) {
    if (digests) (*digests)["meta"].add_row(meta, 2);
    if (meta.text(0) == "finalized") run.finalized = meta.text(1) == "1";
  }
  auto cfg = db.prepare("SELECT key, value FROM run_config ORDER BY key");
  while (cfg.step()) {
    if (digests) (*digests)["run_config"].add_row(cfg, 2);
    run.config.emplace_back(std::string(cfg.text(0)), std::string(cfg.text(1)));
  }
}

void TraceLoader::count_rows() {
  for (const char* t : {"kernels", "memcpy", "memset", "op_ranges", "api_calls", "nvtx_ranges",
                        "memory_events"})
    rows_total_ += db_.query_int(std::string("SELECT count(*) FROM ") + t).value_or(0);
}

void TraceLoader::build_tracks() {
  progress("sorting", 0.99);
  auto& t = trace_;
  // Stream order: by (rank, id). Re-index every event's stream slot.
  std::vector<std::int32_t> order(t.streams.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return std::tie(t.streams[static_cast<std::size_t>(a)].rank, t.streams[static_cast<std::size_t>(a)].id) <
           std::tie(t.streams[static_cast<std::size_t>(b)].rank, t.streams[static_cast<std::size_t>(b)].id);
  });
  std::vector<std::int32_t> new_slot(order.size());
  std::vector<Stream> sorted;
  sorted.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    new_slot[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
    sorted.push_back(std::move(t.streams[static_cast<std::size_t>(order[i])]));
  }
  t.streams = std::move(sorted);
  t.stream_index_.clear();
  for (std::size_t i = 0; i < t.streams.size(); ++i)
    t.stream_index_.emplace_back(t.streams[i].id.value, static_cast<std::int32_t>(i));
  std::sort(t.stream_index_.begin(), t.stream_index_.end());

  // Each activity's op id rides in its op and launched_by fields while the
  // activities are sorted (both are set once op ids have indices).
  for (std::size_t i = 0; i < t.activities.size(); ++i) {
    auto& a = t.activities[i];
    a.stream = new_slot[static_cast<std::size_t>(a.stream)];
    const auto id = static_cast<std::uint64_t>(activity_op_ids_[i]);
    a.op = static_cast<std::int32_t>(static_cast<std::uint32_t>(id));
    a.launched_by = static_cast<std::int32_t>(static_cast<std::uint32_t>(id >> 32));
  }
  std::vector<std::int64_t>().swap(activity_op_ids_);
  for (auto& op : t.ops) op.stream = new_slot[static_cast<std::size_t>(op.stream)];
  // The ops' tracks and op-id index (on a second thread where the tables
  // were read on two), the activities' tracks beside them.
  auto ops_part = [&t] {
    sort_into_tracks(t.ops, t.streams.size(), op_track_order);
    t.op_index_.resize(t.ops.size());
    for (std::size_t i = 0; i < t.ops.size(); ++i) t.op_index_[i] = {t.ops[i].id.value, static_cast<std::int32_t>(i)};
    std::sort(t.op_index_.begin(), t.op_index_.end());
    for (std::size_t i = 1; i < t.op_index_.size(); ++i)
      if (t.op_index_[i].first == t.op_index_[i - 1].first)
        throw Error(t.run.path + ": op id " + std::to_string(t.op_index_[i].first) +
                    " appears twice in op_ranges; damaged trace");
  };
  auto activities_part = [&t] {
    sort_into_tracks(t.activities, t.streams.size(), [](const Activity& a, const Activity& b) {
      return a.stream != b.stream ? a.stream < b.stream : a.start_ns < b.start_ns;
    });
  };
  side_by_side(ops_part, activities_part);
  // Each activity's op id to the op's index, a half on each thread.
  std::atomic<std::int64_t> without_op{0};
  in_two_halves(t.activities.size(), [&t, &without_op](std::size_t begin, std::size_t end) {
    std::int64_t last_op = -1;  // neighbouring kernels are mostly of one op: its index once
    std::int32_t last_index = -1;
    std::int64_t missing = 0;
    for (auto i = begin; i < end; ++i) {
      auto& a = t.activities[i];
      const auto op = static_cast<std::int64_t>(
          (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.launched_by)) << 32) | static_cast<std::uint32_t>(a.op));
      a.launched_by = -1;
      if (op >= 0 && op != last_op) {
        last_op = op;
        last_index = t.op_index(OpId(op));
      }
      a.op = op >= 0 ? last_index : -1;
      if (op >= 0 && a.op < 0) ++missing;
    }
    without_op += missing;
  });
  activities_without_op_ += without_op.load();

  t.activity_track_begin = track_offsets(t.activities, t.streams.size());
  t.op_track_begin = track_offsets(t.ops, t.streams.size());
}


void load_run_record(sqlite::Database& db, RunInfo& run) { TraceLoader::load_run(db, run); }

Trace load_trace(const std::string& path, const LoadOptions& options) {
  if (const auto format = importers::foreign_format(path)) {
    importers::ImportOptions io;
    io.format = *format;
    io.progress = options.progress;
    return TraceLoader(path, importers::import_in_memory(path, io), options).load();
  }
  return TraceLoader(path, options).load();
}

}  // namespace moetrace::analyzer
