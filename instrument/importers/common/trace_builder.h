// The shared "tracker" every importer feeds (in the manner of Perfetto's
// trace_processor: parsers per format, one set of trackers). It owns what must
// be consistent across formats and files: rank numbering (two files may not
// claim one rank), device de-duplication, stream ids and their roles (known
// only once every activity of a stream is seen), counts of dropped source
// records, and the output file, which appears only when the import succeeds.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "moetrace/importers/import.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/instrument/records.h"
#include "moetrace/instrument/trace_writer.h"

namespace moetrace::importers {

using ProgressFn = std::function<void(std::string_view stage, double fraction)>;

// True for NCCL kernels (ncclKernel_*, ncclDevKernel_*): they make a stream `comm`.
bool is_nccl_kernel(std::string_view name);

// The file name of an input path, as importers label what came from it.
std::string file_name(const std::string& path);

class TraceBuilder {
 public:
  TraceBuilder(const std::string& output, Format format, const std::vector<std::string>& inputs,
               ProgressFn progress);
  // The same records into `memory` instead of a file (it must outlive the builder).
  TraceBuilder(ImportedTrace& memory, Format format, const std::vector<std::string>& inputs, ProgressFn progress);
  ~TraceBuilder();  // removes the partial output unless finish() succeeded
  TraceBuilder(const TraceBuilder&) = delete;
  TraceBuilder& operator=(const TraceBuilder&) = delete;

  // Safe to call from several threads at once.
  StringId intern(std::string_view s);
  // Interns a kernel name and remembers whether it is an NCCL kernel.
  StringId kernel_name(std::string_view name) {
    const StringId id = intern(name);
    if (is_nccl_kernel(name)) nccl_names_.insert(id.value);
    return id;
  }

  // Registers rank `number`; `label` says where it came from ("run.sqlite pid
  // 42") and names both sources when two claim the same rank (an Error).
  RankId add_rank(int number, std::int64_t pid, std::string host, const std::string& label);
  bool has_rank(int number) const { return ranks_.count(number) != 0; }
  // A device, de-duplicated by `key` (e.g. its UUID); r.id is assigned here.
  DeviceId add_device(instrument::DeviceRecord r, const std::string& key);
  // Describes device `id` anew (its rows are written by finish()).
  void describe_device(DeviceId id, instrument::DeviceRecord r) {
    r.id = id;
    device_records_.at(static_cast<std::size_t>(id.value)) = std::move(r);
  }
  // The stream of (rank, device, native stream id), created on first use.
  StreamId stream(RankId rank, DeviceId device, std::int64_t native_id);
  void set_stream_priority(StreamId s, int priority);
  // The device a rank uses where it ran no activity (e.g. a CPU-only trace).
  void set_default_device(RankId rank, DeviceId device);

  // Records. Activities note their stream's content (for its role) and their
  // rank's device; intervals that end before they start are dropped and
  // counted ("negative_duration"), since the loader rejects them as damage.
  void add(const instrument::KernelRecord& r);
  void add(const instrument::MemcpyRecord& r);
  void add(const instrument::MemsetRecord& r);
  void add(const instrument::ApiCallRecord& r);
  void add(const instrument::SyncRecord& r);
  void add(const instrument::OverheadRecord& r);
  void add(const instrument::NvtxRangeRecord& r);
  void add(const instrument::MemoryEventRecord& r);
  void add(const instrument::CollectiveRecord& r);
  // An op range (moetrace's own Chrome export read back); its id as written
  // (invalid: not written).
  OpId add(const instrument::OpRangeRecord& r);

  // A source record the importer does not map, by reason; stored as
  // run_config import.skipped.<reason> and shown by `moetrace info`.
  void skip(std::string_view reason, std::int64_t n = 1);
  void config(const std::string& key, const std::string& value);
  // At most `n` more events are coming (a bound, e.g. from the input's size):
  // a builder into memory reserves its event tables for them once, so that
  // they do not grow by doubling (copies, fresh pages each time); the pages
  // are touched only as rows arrive. A file's writer needs no room.
  void expect_events(std::size_t n);
  // The run's size where the source knows it (e.g. Kineto's world_size); the
  // trace's world size is the larger of this and the ranks imported.
  void note_world_size(int n) { world_size_ = std::max(world_size_, n); }

  // May be called from several threads (a file parsed while another is
  // written); the callback sees one call at a time.
  void progress(std::string_view stage, double fraction) {
    if (!progress_) return;
    std::lock_guard lock(progress_mutex_);
    progress_(stage, fraction);
  }

  // Streams with their roles, ranks with their devices, counts; closes the
  // trace and moves it to the output path (or completes the records in
  // memory). Throws if nothing was imported.
  ImportSummary finish();

 private:
  struct StreamState {
    StreamId id;
    RankId rank;
    DeviceId device;
    std::int64_t native_id = -1;
    int priority = 0;
    std::int64_t kernels = 0, nccl_kernels = 0, copies = 0;
  };
  struct RankState {
    std::int64_t pid = -1;
    std::string host;
    std::string label;
    std::map<std::int32_t, std::int64_t> device_use;  // device id -> activities
    DeviceId default_device;
  };
  bool valid_interval(std::int64_t start, std::int64_t end);
  void note_activity(StreamId s, bool kernel, bool nccl);
  // The tables whose rows are counted: a counter each, not a map looked up
  // by name for every record (strlen and string compares were 5 % of a
  // parsing thread's samples).
  enum Counted : std::size_t {
    kKernels, kMemcpy, kMemset, kApiCalls, kSyncEvents, kOverhead, kNvtxRanges, kMemoryEvents, kCollectives,
    kOpRanges, kCountedTables
  };
  static constexpr std::array<const char*, kCountedTables> kCountedNames = {  // in Counted's order
      "kernels", "memcpy", "memset", "api_calls", "sync_events", "overhead", "nvtx_ranges", "memory_events",
      "collectives", "op_ranges"};
  void count(Counted table) { ++rows_[table]; }
  std::map<std::string, std::int64_t> rows() const;
  class Memory;  // the records of an import into memory
  template <class Record>
  void emit(const Record& r);
  // Writes `r` where its interval is valid, counted in `table`.
  template <class Record>
  void add_interval(const Record& r, Counted table);
  // The same for a GPU activity, first noted on its stream.
  template <class Record>
  void add_activity(const Record& r, bool kernel, bool nccl, Counted table);

  std::string output_;
  Format format_;
  std::vector<std::string> inputs_;
  ProgressFn progress_;
  std::mutex progress_mutex_;
  std::unique_ptr<instrument::TraceWriter> writer_;  // null: into memory_
  std::unique_ptr<Memory> memory_;
  std::map<int, RankState> ranks_;
  std::map<std::string, DeviceId> devices_;
  std::vector<instrument::DeviceRecord> device_records_;
  std::map<std::tuple<std::int32_t, std::int32_t, std::int64_t>, std::size_t> stream_index_;
  std::vector<StreamState> streams_;
  std::map<std::string, std::int64_t> skipped_;
  std::array<std::int64_t, kCountedTables> rows_{};
  std::unordered_set<std::int32_t> nccl_names_;  // kernel name ids of NCCL kernels
  int world_size_ = 0;
};

}  // namespace moetrace::importers
