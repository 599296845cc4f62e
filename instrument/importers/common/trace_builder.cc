#include "trace_builder.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"

namespace moetrace::importers {

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

bool is_nccl_kernel(std::string_view name) {
  // Kineto names kernels as launched ("ncclKernel_AllReduce_..."), nsys may
  // prefix "void "; NCCL's own kernels all start with "nccl" after that.
  if (name.substr(0, 5) == "void ") name.remove_prefix(5);
  if (name.size() < 4) return false;
  return to_ascii_lower(name.substr(0, 4)) == "nccl";
}

namespace {

instrument::RunRecord run_record(Format format, const std::vector<std::string>& inputs) {
  instrument::RunRecord run;
  run.backend = std::string(format_name(format));
  run.simulated = false;
  run.world_size = 1;  // corrected by finish() once the ranks are known
  std::vector<std::string> names;
  for (const auto& in : inputs) names.push_back(std::filesystem::path(in).filename().string());
  run.name = names.empty() ? "" : names.front();
  if (names.size() > 1) run.name += " (+" + std::to_string(names.size() - 1) + " more)";
  nlohmann::json cfg = {{"import", {{"format", std::string(format_name(format))}, {"sources", inputs}}}};
  run.config_json = cfg.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return run;
}

}  // namespace

// What the TraceWriter would store, kept in memory: strings numbered in the
// order they are interned, op ids assigned as the writer assigns them, and
// the run's time range over every timed record.
class TraceBuilder::Memory {
 public:
  explicit Memory(ImportedTrace& out) : out_(out) {}

  StringId intern(std::string_view s) {
    std::lock_guard lock(mu_);
    if (const auto it = ids_.find(s); it != ids_.end()) return it->second;
    const StringId id(static_cast<std::int32_t>(out_.strings.size()));
    out_.strings.emplace_back(s);
    ids_.emplace(std::string(s), id);
    return id;
  }
  void add(const instrument::DeviceRecord& r) { out_.devices.push_back(r); }
  void add(const instrument::RankRecord& r) { out_.ranks.push_back(r); }
  void add(const instrument::StreamRecord& r) { out_.streams.push_back(r); }
  void add(const instrument::KernelRecord& r) { timed(out_.kernels, r); }
  void add(const instrument::MemcpyRecord& r) { timed(out_.memcpys, r); }
  void add(const instrument::MemsetRecord& r) { timed(out_.memsets, r); }
  void add(const instrument::ApiCallRecord& r) { timed(out_.api_calls, r); }
  void add(const instrument::NvtxRangeRecord& r) { timed(out_.nvtx, r); }
  void add(const instrument::CollectiveRecord& r) { timed(out_.collectives, r); }
  void add(const instrument::SyncRecord& r) { timed(out_.sync_events, r); }
  // A table the analyzer does not read: only its times count.
  void add(const instrument::OverheadRecord& r) {
    std::lock_guard lock(mu_);
    span(r.start_ns, r.end_ns);
  }
  void add(const instrument::MemoryEventRecord& r) {
    std::lock_guard lock(mu_);
    out_.memory_events.push_back(r);
    span(r.ts_ns, r.ts_ns);
  }
  OpId add(instrument::OpRangeRecord r) {
    std::lock_guard lock(mu_);
    if (!r.id.valid()) r.id = OpId(next_op_id_);
    next_op_id_ = std::max(next_op_id_, r.id.value + 1);
    span(r.start_ns, r.end_ns);
    out_.ops.push_back(r);
    return r.id;
  }
  void set_config(const std::string& key, const std::string& value) {
    std::lock_guard lock(mu_);
    out_.config.emplace_back(key, value);
  }
  void set_world_size(int n) { out_.run.world_size = n; }
  void reserve(std::size_t n) {
    std::lock_guard lock(mu_);
    out_.nvtx.reserve(out_.nvtx.size() + n);
    out_.kernels.reserve(out_.kernels.size() + n);
    out_.api_calls.reserve(out_.api_calls.size() + n);
  }

 private:
  template <class Record>
  void timed(std::vector<Record>& table, const Record& r) {
    std::lock_guard lock(mu_);
    table.push_back(r);
    span(r.start_ns, r.end_ns);
  }
  void span(std::int64_t start, std::int64_t end) {
    out_.start_ns = std::min(out_.start_ns, start);
    out_.end_ns = std::max(out_.end_ns, std::max(start, end));
  }
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  ImportedTrace& out_;
  std::mutex mu_;
  std::unordered_map<std::string, StringId, Hash, std::equal_to<>> ids_;
  std::int64_t next_op_id_ = 0;
};

template <class Record>
void TraceBuilder::emit(const Record& r) {
  if (writer_) writer_->add(r);
  else memory_->add(r);
}

StringId TraceBuilder::intern(std::string_view s) { return writer_ ? writer_->intern(s) : memory_->intern(s); }

TraceBuilder::TraceBuilder(ImportedTrace& memory, Format format, const std::vector<std::string>& inputs,
                           ProgressFn progress)
    : format_(format), inputs_(inputs), progress_(std::move(progress)), memory_(std::make_unique<Memory>(memory)) {
  memory = ImportedTrace{};
  memory.run = run_record(format, inputs);
  config("import.format", std::string(format_name(format)));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    config("import.source." + std::to_string(i), inputs[i]);
}

TraceBuilder::TraceBuilder(const std::string& output, Format format,
                           const std::vector<std::string>& inputs, ProgressFn progress)
    : output_(output),
      format_(format),
      inputs_(inputs),
      progress_(std::move(progress)) {
  // Not durable: the trace appears (by rename) only once complete, so a crash
  // or an error mid-import leaves no half trace, and imports skip disk syncs.
  instrument::WriterOptions options;
  options.durable = false;
  // Rows go in (indexes updated) while the records are still being emitted.
  // The parse outruns SQLite: without a bound, rows piled up while the
  // flusher wrote (batches of 190k rows in a 217 MB import), and a large
  // batch was left to write on one core after the parse. Small batches keep
  // that part short: 8k/16k rows against 32k/64k took a 217 MB import from
  // 0.78 to 0.66 s and a 1 GB one from 4.3 to 3.8 s (BENCHMARKS.md).
  options.flush_rows = std::size_t{1} << 13;
  options.max_pending_rows = std::size_t{1} << 14;
  options.indexes_first = true;
  // Small inputs (a few MB of JSON or SQLite) make small traces: 4 KiB pages
  // (1.3 ms of a 23 ms import of a 1.8 MB Kineto file, BENCHMARKS.md).
  std::uintmax_t bytes = 0;
  for (const auto& in : inputs) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(in, ec);
    if (!ec) bytes += in.ends_with(".gz") ? n * 8 : n;  // JSON compresses about 8x
  }
  if (bytes < (std::uintmax_t{64} << 20)) options.page_size = 4096;
  writer_ = std::make_unique<instrument::TraceWriter>(output_, run_record(format, inputs), options);
  config("import.format", std::string(format_name(format)));
  for (std::size_t i = 0; i < inputs.size(); ++i)
    config("import.source." + std::to_string(i), inputs[i]);
}

TraceBuilder::~TraceBuilder() = default;  // an unfinished writer discards its file

RankId TraceBuilder::add_rank(int number, std::int64_t pid, std::string host,
                              const std::string& label) {
  if (number < 0) throw Error(label + ": negative rank " + std::to_string(number));
  auto [it, inserted] = ranks_.try_emplace(number);
  if (!inserted)
    throw Error(label + ": rank " + std::to_string(number) + " is also " + it->second.label +
                "; each input must be a different rank");
  it->second.pid = pid;
  it->second.host = std::move(host);
  it->second.label = label;
  config("import.rank." + std::to_string(number), label);
  return RankId(number);
}

DeviceId TraceBuilder::add_device(instrument::DeviceRecord r, const std::string& key) {
  auto it = devices_.find(key);
  if (it != devices_.end()) return it->second;
  r.id = DeviceId(static_cast<std::int32_t>(device_records_.size()));
  devices_.emplace(key, r.id);
  device_records_.push_back(r);
  return r.id;
}

StreamId TraceBuilder::stream(RankId rank, DeviceId device, std::int64_t native_id) {
  auto key = std::make_tuple(rank.value, device.value, native_id);
  auto it = stream_index_.find(key);
  if (it != stream_index_.end()) return streams_[it->second].id;
  StreamState s;
  s.id = StreamId(static_cast<std::int32_t>(streams_.size()));
  s.rank = rank;
  s.device = device;
  s.native_id = native_id;
  stream_index_.emplace(key, streams_.size());
  streams_.push_back(s);
  return s.id;
}

void TraceBuilder::set_stream_priority(StreamId s, int priority) {
  if (s.valid() && static_cast<std::size_t>(s.value) < streams_.size())
    streams_[static_cast<std::size_t>(s.value)].priority = priority;
}

void TraceBuilder::set_default_device(RankId rank, DeviceId device) {
  auto it = ranks_.find(rank.value);
  if (it != ranks_.end()) it->second.default_device = device;
}

bool TraceBuilder::valid_interval(std::int64_t start, std::int64_t end) {
  if (end >= start) return true;
  skip("negative_duration");
  return false;
}

void TraceBuilder::note_activity(StreamId s, bool kernel, bool nccl) {
  auto& st = streams_.at(static_cast<std::size_t>(s.value));
  if (kernel) {
    ++st.kernels;
    if (nccl) ++st.nccl_kernels;
  } else {
    ++st.copies;
  }
  auto r = ranks_.find(st.rank.value);
  if (r != ranks_.end()) ++r->second.device_use[st.device.value];
}

template <class Record>
void TraceBuilder::add_interval(const Record& r, Counted table) {
  if (!valid_interval(r.start_ns, r.end_ns)) return;
  emit(r);
  count(table);
}

template <class Record>
void TraceBuilder::add_activity(const Record& r, bool kernel, bool nccl, Counted table) {
  if (!valid_interval(r.start_ns, r.end_ns)) return;
  note_activity(r.stream, kernel, nccl);
  emit(r);
  count(table);
}

void TraceBuilder::add(const instrument::KernelRecord& r) {
  // Importers intern kernel names through kernel_name(), which notes NCCL ones.
  add_activity(r, true, nccl_names_.count(r.name.value) != 0, kKernels);
}

void TraceBuilder::add(const instrument::MemcpyRecord& r) { add_activity(r, false, false, kMemcpy); }

void TraceBuilder::add(const instrument::MemsetRecord& r) { add_activity(r, false, false, kMemset); }

void TraceBuilder::add(const instrument::ApiCallRecord& r) { add_interval(r, kApiCalls); }

void TraceBuilder::add(const instrument::SyncRecord& r) { add_interval(r, kSyncEvents); }

void TraceBuilder::add(const instrument::OverheadRecord& r) { add_interval(r, kOverhead); }

void TraceBuilder::add(const instrument::NvtxRangeRecord& r) {
  if (r.end_ns >= 0 && !valid_interval(r.start_ns, r.end_ns)) return;
  emit(r);
  count(kNvtxRanges);
}

void TraceBuilder::add(const instrument::MemoryEventRecord& r) {
  emit(r);
  count(kMemoryEvents);
}

void TraceBuilder::add(const instrument::CollectiveRecord& r) { add_interval(r, kCollectives); }

OpId TraceBuilder::add(const instrument::OpRangeRecord& r) {
  if (!valid_interval(r.start_ns, r.end_ns)) return OpId();
  count(kOpRanges);
  return writer_ ? writer_->add(r) : memory_->add(r);
}

void TraceBuilder::skip(std::string_view reason, std::int64_t n) {
  if (n > 0) skipped_[std::string(reason)] += n;
}

void TraceBuilder::expect_events(std::size_t n) {
  if (memory_) memory_->reserve(n);
}

void TraceBuilder::config(const std::string& key, const std::string& value) {
  if (writer_) writer_->set_config(key, value);
  else memory_->set_config(key, value);
}

// The tables with rows, and how many each.
std::map<std::string, std::int64_t> TraceBuilder::rows() const {
  std::map<std::string, std::int64_t> out;
  for (std::size_t i = 0; i < rows_.size(); ++i)
    if (rows_[i] > 0) out.emplace(kCountedNames[i], rows_[i]);
  return out;
}

ImportSummary TraceBuilder::finish() {
  std::int64_t events = 0;
  for (const std::int64_t n : rows_) events += n;
  if (events == 0) {
    std::string what = inputs_.size() == 1 ? inputs_.front() : std::to_string(inputs_.size()) + " inputs";
    throw Error(what + ": no events to import (no kernels, copies, API calls or ranges)");
  }
  // Ranks run on the device they used most; a rank with no GPU activity keeps
  // the device its importer named, else a placeholder "unknown" device.
  std::optional<DeviceId> unknown_device;
  for (auto& [number, rank] : ranks_) {
    DeviceId device = rank.default_device;
    std::int64_t best = -1;
    for (const auto& [dev, n] : rank.device_use)
      if (n > best) {
        best = n;
        device = DeviceId(dev);
      }
    if (!device.valid()) {
      if (!unknown_device) {
        instrument::DeviceRecord d;
        d.name = "unknown";
        unknown_device = add_device(d, "\x01unknown");
      }
      device = *unknown_device;
    }
    instrument::RankRecord r;
    r.rank = RankId(number);
    r.device = device;
    r.host = rank.host;
    r.pid = rank.pid;
    emit(r);
  }
  for (const auto& d : device_records_) emit(d);
  // A stream that ran an NCCL kernel is communication; one that only copied is
  // a copy engine lane; any other kernel makes it compute.
  for (const auto& s : streams_) {
    instrument::StreamRecord r;
    r.id = s.id;
    r.rank = s.rank;
    r.device = s.device;
    r.native_id = s.native_id;
    r.role = s.nccl_kernels > 0 ? instrument::kRoleComm
             : s.kernels > 0    ? instrument::kRoleCompute
             : s.copies > 0     ? instrument::kRoleCopy
                                : instrument::kRoleOther;
    r.name = s.native_id >= 0 ? "stream " + std::to_string(s.native_id) : "stream";
    r.priority = s.priority;
    emit(r);
  }
  for (const auto& [reason, n] : skipped_) config("import.skipped." + reason, std::to_string(n));
  // The writer fixes the run row when it opens; the world size is known only now.
  const int world = std::max(world_size_, static_cast<int>(ranks_.size()));
  if (writer_) {
    writer_->set_world_size(std::max(world, 1));
    progress("writing indexes", 0.99);
    writer_->close();
    writer_.reset();
  } else {
    memory_->set_world_size(std::max(world, 1));
  }

  ImportSummary summary;
  summary.output = output_;
  summary.format = format_;
  summary.ranks = static_cast<int>(ranks_.size());
  summary.world_size = std::max(world, 1);
  summary.rows = rows();
  summary.skipped = skipped_;
  return summary;
}

}  // namespace moetrace::importers
