// PyTorch-profiler (Kineto) Chrome-trace JSON -> moetrace trace: each file is
// parsed into compact records (kineto_parse.cc) and written here (FileWriter),
// batch by batch while it is parsed, with the rank and time base its last
// bytes hold (`distributedInfo` and `baseTimeNanoseconds` may come after
// `traceEvents`); the few records that need the whole file, at its end.
#include "kineto_importer.h"

#include <algorithm>
#include <cstdlib>
#include <future>
#include <map>
#include <unordered_map>

#include "../common/trace_builder.h"
#include "gzip_input.h"
#include "kineto_records.h"
#include "moetrace/schema/error.h"

namespace moetrace::importers::kineto {

namespace {

// The common form, [-]d{1,15}[.d+]: integer arithmetic, no digit buffer.
// nullopt where the general path below must decide.
std::optional<std::int64_t> micros_to_ns_fast(std::string_view text) {
  std::size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) ++i;
  std::int64_t whole = 0;
  const std::size_t first = i;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (i - first == 15) return std::nullopt;  // before a 16th digit could overflow below
    whole = whole * 10 + (text[i] - '0');
  }
  if (i == first) return std::nullopt;
  std::int64_t frac = 0;
  int decimals = 0;
  bool round_up = false;
  if (i < text.size() && text[i] == '.') {
    const std::size_t point = ++i;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (decimals < 3) frac = frac * 10 + (text[i] - '0');
      else if (decimals == 3) round_up = text[i] >= '5';
      ++decimals;
    }
    if (i == point) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;  // an exponent, or junk
  for (int d = decimals; d < 3; ++d) frac *= 10;
  const std::int64_t ns = whole * 1000 + frac + (round_up ? 1 : 0);
  return negative ? -ns : ns;
}

}  // namespace

std::optional<std::int64_t> micros_to_ns(std::string_view text) {
  if (auto ns = micros_to_ns_fast(text)) return ns;
  // value = digits x 10^(exponent - decimals) us = digits x 10^shift ns.
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) negative = text[i++] == '-';
  // The significant digits (at most 401, as before: longer is refused).
  struct Digits {
    std::array<char, 402> d;
    std::size_t n = 0;
    std::size_t size() const { return n; }
    bool empty() const { return n == 0; }
    void push(char c) { d[n++] = c; }
    char operator[](std::size_t k) const { return d[k]; }
  } digits;
  long decimals = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
    } else if (c >= '0' && c <= '9') {
      if (digits.size() > 400) return std::nullopt;
      if (!(digits.empty() && c == '0')) digits.push(c);  // leading zeros carry no value
      if (point) ++decimals;
    } else {
      break;
    }
  }
  if (i == 0 || (i == 1 && (text[0] == '-' || text[0] == '+'))) return std::nullopt;
  long exponent = 0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) exp_negative = text[i++] == '-';
    if (i >= text.size()) return std::nullopt;
    for (; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9' || exponent > 100000) return std::nullopt;
      exponent = exponent * 10 + (text[i] - '0');
    }
    if (exp_negative) exponent = -exponent;
  }
  if (i != text.size()) return std::nullopt;
  const long shift = 3 + exponent - decimals;
  // Integer digits of the ns value, then the first dropped digit for rounding.
  const long keep = static_cast<long>(digits.size()) + shift;
  std::int64_t ns = 0;
  for (long d = 0; d < keep; ++d) {
    const int digit = d < static_cast<long>(digits.size()) ? digits[static_cast<std::size_t>(d)] - '0' : 0;
    if (__builtin_mul_overflow(ns, std::int64_t{10}, &ns) || __builtin_add_overflow(ns, digit, &ns))
      return std::nullopt;
  }
  // Round half up: the sub-ns digits of a timestamp.
  if (keep >= 0 && keep < static_cast<long>(digits.size()) && digits[static_cast<std::size_t>(keep)] >= '5' &&
      __builtin_add_overflow(ns, std::int64_t{1}, &ns))
    return std::nullopt;
  return negative ? -ns : ns;
}

namespace {

struct FlowKey {
  std::int64_t pid, tid, ts;
  bool operator==(const FlowKey&) const = default;
};
struct FlowKeyHash {
  std::size_t operator()(const FlowKey& k) const noexcept {
    return std::hash<std::int64_t>{}(k.pid * 1000003 ^ k.tid * 7919 ^ k.ts);
  }
};

// The first tensor's element count in an "Input Dims" text ("[[8,64],[]]":
// 512), -1 where it has none.
std::int64_t first_tensor_elements(std::string_view dims) {
  const auto open = dims.find('[', 1), close = dims.find(']', open == std::string_view::npos ? 0 : open);
  if (open == std::string_view::npos || close == std::string_view::npos || close == open + 1) return -1;
  std::int64_t n = 1;
  for (std::string_view rest = dims.substr(open + 1, close - open - 1); !rest.empty();) {
    const auto comma = rest.find(',');
    n *= std::strtoll(std::string(rest.substr(0, comma)).c_str(), nullptr, 10);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return n;
}

// NCCL kernels without Kineto's collective args (older PyTorch): described
// from the "nccl:<name>" range that launched them (the range holding the
// launch call, by correlation id, on its thread): the collective's name and
// its first input's element count and type. Without the range, none.
void describe_from_ranges(ParsedFile& p, const std::vector<CpuRange>& ranges, const std::vector<ApiCall>& api) {
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<const CpuRange*>> calls;  // (pid, tid) -> by start
  for (const auto& r : ranges)
    if (!r.comm_dims.empty()) calls[{r.pid, r.tid}].push_back(&r);
  if (calls.empty()) return;
  // The launches of the NCCL kernels to describe, the first call of each
  // correlation id: a map of those only, not of every launch (1-2 % of an
  // import, after its parse).
  auto undescribed = [&p](const GpuActivity& a) {
    return a.type == ActivityType::kKernel && a.collective < 0 && a.correlation != 0 &&
           p.strings[static_cast<std::size_t>(a.name)].starts_with("nccl");
  };
  std::unordered_map<std::int64_t, const ApiCall*> launch;
  for (const auto& a : p.gpu)
    if (undescribed(a)) launch.emplace(a.correlation, nullptr);
  if (launch.empty()) return;
  for (const auto& a : api)
    if (a.correlation != 0)
      if (const auto l = launch.find(a.correlation); l != launch.end() && !l->second) l->second = &a;
  for (auto& [thread, v] : calls)
    std::sort(v.begin(), v.end(), [](const CpuRange* x, const CpuRange* y) { return x->start < y->start; });
  for (auto& a : p.gpu) {
    if (!undescribed(a)) continue;
    const auto l = launch.find(a.correlation);
    if (l == launch.end() || !l->second) continue;
    const auto t = calls.find({l->second->pid, l->second->tid});
    if (t == calls.end()) continue;
    const CpuRange* owner = nullptr;  // the innermost range holding the launch
    for (const CpuRange* r : t->second) {
      if (r->start > l->second->start) break;
      if (r->end >= l->second->start) owner = r;
    }
    if (!owner) continue;
    Collective c;
    c.name = p.strings[static_cast<std::size_t>(owner->name)].substr(5);
    c.in_nelems = first_tensor_elements(owner->comm_dims);
    if (const auto q = owner->comm_types.find('"'); q != std::string::npos)
      c.dtype = owner->comm_types.substr(q + 1, owner->comm_types.find('"', q + 1) - q - 1);
    a.collective = static_cast<std::int32_t>(p.collectives.size());
    p.collectives.push_back(std::move(c));
  }
}

// Writes one file's records into the builder: with a tail read ahead, the
// batches' records as they are parsed (take), those that need the whole
// file (correlation ids from flows, NCCL kernels described by their call's
// range, moetrace's own export) at the end (finish); without one, all at the
// end, once the file's rank and time base are known.
class FileWriter : public BatchSink {
 public:
  // `tail`: read_tail's result, awaited when the first records arrive (a
  // gzip file's is inflated meanwhile); invalid: the file is written whole.
  FileWriter(const std::string& path, std::size_t file_index, TraceBuilder& b,
             std::future<std::optional<Tail>> tail = {})
      : path_(path), label_(file_name(path)), index_(file_index), b_(b), tail_future_(std::move(tail)) {}

  void take(ParsedFile& file, ParsedFile& batch) override {
    const bool records = !batch.gpu.empty() || !batch.api.empty() || !batch.ranges.empty() ||
                         !batch.memory.empty() || !batch.ops.empty() || !batch.syncs.empty();
    if (!decided_ && records) {
      decided_ = true;
      if (tail_future_.valid()) tail_ = tail_future_.get();
      // moetrace's own export names its ranks per process, and its ops come
      // before their kernels: written at the end.
      streaming_ = tail_ && !file.moetrace_export;
      if (streaming_) {
        rank_ = file.rank ? file.rank : tail_->rank;
        try {
          begin(file, rank_, file.base_time_seen ? file.base_time_ns : tail_->base_time_ns.value_or(0));
        } catch (const Error&) {
          // A guessed rank out of range or taken by another file: only the
          // whole parse can tell whether the file's rank really is.
          if (file.rank) throw;
          streaming_ = false;
        }
      }
    }
    if (!streaming_) return;
    // Kept for NCCL kernels to be described at the end.
    for (const auto& r : batch.ranges)
      if (!r.comm_dims.empty()) comm_ranges_.push_back(r);
    for (const auto& a : batch.api)
      if (a.correlation != 0) launches_.push_back(a);
    // Kept: what needs the rest of the file (see above).
    auto later = [&](const GpuActivity& a) {
      return a.correlation == 0 || (a.type == ActivityType::kKernel && a.collective < 0 &&
                                    file.strings[static_cast<std::size_t>(a.name)].starts_with("nccl"));
    };
    std::erase_if(batch.gpu, [&](const GpuActivity& a) {
      if (later(a)) return false;
      gpu(file, batch.collectives, a);
      return true;
    });
    std::erase_if(batch.api, [&](const ApiCall& a) {
      if (a.correlation == 0) return false;
      api(file, a);
      return true;
    });
    for (const auto& r : batch.ranges) range(file, r);
    batch.ranges.clear();
    for (const auto& m : batch.memory) memory(file, m);
    batch.memory.clear();
    for (const auto& y : batch.syncs) sync(file, y);
    batch.syncs.clear();
  }

  // Writes what is left of `p`, whose records were all kept unless batches
  // were taken; throws TailGuessedWrong where those were written with a rank or
  // a time base the file does not have.
  void finish(ParsedFile& p) {
    if (streaming_) {
      if (p.base_time_ns != base_ || p.rank != rank_ || p.moetrace_export)
        throw TailGuessedWrong(path_ + ": the members after traceEvents are not what its last bytes suggested");
      // deviceProperties may come after the events.
      for (const auto& [id, dev] : devices_by_id_) b_.describe_device(dev, describe(p, id));
      describe_from_ranges(p, comm_ranges_, launches_);
    } else {
      describe_from_ranges(p, p.ranges, p.api);
      begin(p, p.rank, p.base_time_ns);
    }
    const auto idx = std::to_string(index_);
    if (p.world_size && *p.world_size > 0 && *p.world_size <= (1 << 24))
      b_.note_world_size(static_cast<int>(*p.world_size));
    if (p.world_size) b_.config("import.kineto.world_size." + idx, std::to_string(*p.world_size));
    if (!p.backend.empty()) b_.config("import.kineto.backend." + idx, p.backend);
    if (!p.nccl_version.empty()) b_.config("import.kineto.nccl_version." + idx, p.nccl_version);
    b_.config("import.kineto.base_time_ns." + idx, std::to_string(p.base_time_ns));
    if (!gpu_written_ && p.gpu.empty() && p.devices.size() == 1 && !p.moetrace_export)
      b_.set_default_device(file_rank_, device(p, static_cast<std::int32_t>(p.devices.front().id)));

    // Correlation ids from ac2g flows, for events whose args lack one.
    const bool need_flows =
        std::any_of(p.gpu.begin(), p.gpu.end(), [](const GpuActivity& a) { return a.correlation == 0; }) ||
        std::any_of(p.api.begin(), p.api.end(), [](const ApiCall& a) { return a.correlation == 0; });
    if (need_flows)
      for (const auto& f : p.flows) flow_at_.emplace(FlowKey{f.pid, f.tid, f.ts}, f.id);

    std::int64_t done = 0;
    const auto total = static_cast<double>(p.gpu.size() + p.api.size() + p.ranges.size() + 1);
    auto step = [&] {
      if ((++done & 0x3FFF) == 0) b_.progress("writing " + label_, static_cast<double>(done) / total);
    };
    // moetrace's own export: its op ranges, each on the stream of its first
    // kernel (the op lanes beside a stream are no stream of their own).
    std::map<std::pair<std::int64_t, std::int64_t>, StreamId> op_stream;  // (pid, op id) -> stream
    for (const auto& a : p.gpu)
      if (a.op >= 0)
        op_stream.try_emplace({a.device, a.op}, b_.stream(rank_of(p, a.device), device(p, a.device), a.stream));
    for (const auto& o : p.ops) {
      const RankId rank = rank_of(p, o.pid);
      auto it = op_stream.find({o.pid, o.id});
      instrument::OpRangeRecord r;
      r.rank = rank;
      r.stream = it != op_stream.end() ? it->second : b_.stream(rank, device(p, o.pid), o.tid);
      r.kind = o.kind;
      r.name = name(p, o.name, false);
      r.layer = o.layer;
      r.iteration = o.iteration;
      r.micro_batch = o.micro_batch;
      r.chunk = o.chunk;
      r.phase = o.phase;
      r.start_ns = shift(o.start);
      r.end_ns = shift(o.end);
      r.flops = o.flops;
      r.bytes = o.bytes;
      if (o.peer >= 0) r.peer = RankId(static_cast<std::int32_t>(o.peer));
      if (const OpId id = b_.add(r); id.valid()) op_ids_.try_emplace({o.pid, o.id}, id);
    }
    for (const auto& a : p.gpu) {
      step();
      gpu(p, p.collectives, a);
    }
    for (const auto& a : p.api) {
      step();
      api(p, a);
    }
    for (const auto& r : p.ranges) {
      step();
      range(p, r);
    }
    for (const auto& m : p.memory) memory(p, m);
    for (const auto& y : p.syncs) sync(p, y);
    for (const auto& [reason, n] : p.skipped) b_.skip(reason, n);
  }

 private:
  // The file's rank (unless it is moetrace's own export) and time base.
  void begin(const ParsedFile& p, std::optional<std::int64_t> rank, std::int64_t base) {
    if (rank && (*rank < 0 || *rank > (1 << 24)))
      throw Error(path_ + ": distributedInfo has rank " + std::to_string(*rank) + ", out of range");
    base_ = base;
    if (!p.moetrace_export) {
      const int number = rank ? static_cast<int>(*rank) : static_cast<int>(index_);
      file_rank_ = b_.add_rank(number, -1, "", label_ + (rank ? " (distributedInfo rank)" : " (file order)"));
    }
  }

  std::int64_t shift(std::int64_t t) const {
    std::int64_t out = 0;
    if (__builtin_add_overflow(t, base_, &out)) return t;
    return out;
  }

  // A file is one rank, except moetrace's own export, whose processes are
  // the ranks of the trace it came from (pid = rank).
  RankId rank_of(const ParsedFile& p, std::int64_t pid) {
    if (!p.moetrace_export) return file_rank_;
    auto it = export_ranks_.find(pid);
    if (it == export_ranks_.end())
      it = export_ranks_
               .emplace(pid, b_.add_rank(static_cast<int>(std::clamp<std::int64_t>(pid, 0, 1 << 24)), -1, "",
                                         label_ + " (process " + std::to_string(pid) + " of a moetrace export)"))
               .first;
    return it->second;
  }

  // Devices: those the file's GPU events ran on, described by deviceProperties.
  DeviceId device(const ParsedFile& p, std::int32_t id) {
    auto it = devices_by_id_.find(id);
    if (it != devices_by_id_.end()) return it->second;
    auto dev = b_.add_device(describe(p, id), path_ + "#gpu" + std::to_string(id));
    devices_by_id_.emplace(id, dev);
    return dev;
  }
  static instrument::DeviceRecord describe(const ParsedFile& p, std::int32_t id) {
    instrument::DeviceRecord d;
    d.name = "GPU " + std::to_string(id);
    for (const auto& props : p.devices)
      if (props.id == id) {
        if (!props.name.empty()) d.name = props.name;
        d.compute_major = props.major;
        d.compute_minor = props.minor;
        d.sm_count = props.sms;
        d.memory_bytes = props.memory;
      }
    return d;
  }

  StringId name(const ParsedFile& p, std::int32_t i, bool kernel) {
    const auto u = static_cast<std::size_t>(i);
    if (u >= names_.size()) names_.resize(p.strings.size());
    if (!names_[u]) names_[u] = kernel ? b_.kernel_name(p.strings[u]) : b_.intern(p.strings[u]);
    return *names_[u];
  }

  std::int64_t flow_id(std::int64_t pid, std::int64_t tid, std::int64_t ts) const {
    auto it = flow_at_.find({pid, tid, ts});
    return it == flow_at_.end() ? 0 : it->second;
  }

  void gpu(const ParsedFile& p, const std::vector<Collective>& collectives, const GpuActivity& a) {
    gpu_written_ = true;
    const RankId rank = rank_of(p, a.device);  // the export's GPU events have pid = rank, no device arg
    const auto stream = b_.stream(rank, device(p, a.device), a.stream);
    const auto corr = a.correlation != 0 ? a.correlation : flow_id(a.device, a.stream, a.start);
    if (a.type == ActivityType::kKernel) {
      instrument::KernelRecord k{.rank = rank, .stream = stream, .start_ns = shift(a.start), .end_ns = shift(a.end),
                                 .name = name(p, a.name, true), .correlation_id = corr};
      if (a.op >= 0)
        if (auto it = op_ids_.find({a.device, a.op}); it != op_ids_.end()) k.op = it->second;
      if (a.launch[0] >= 0) {
        for (std::size_t i = 0; i < 3; ++i) {
          k.grid[i] = a.launch[i];
          k.block[i] = a.launch[3 + i];
        }
        k.registers = a.registers;
        k.shared_bytes = a.shared;
      }
      b_.add(k);
      if (a.collective >= 0) {
        const auto& c = collectives[static_cast<std::size_t>(a.collective)];
        b_.add(instrument::CollectiveRecord{
            .rank = rank, .stream = stream, .start_ns = k.start_ns, .end_ns = k.end_ns, .correlation_id = corr,
            .name = c.name, .in_nelems = c.in_nelems, .out_nelems = c.out_nelems, .dtype = c.dtype,
            .group_size = c.group_size, .group_ranks = c.group_ranks, .process_group = c.process_group,
            .in_splits = c.in_splits, .out_splits = c.out_splits, .seq = c.seq});
      }
    } else if (a.type == ActivityType::kMemcpy) {
      b_.add(instrument::MemcpyRecord{.rank = rank, .stream = stream, .start_ns = shift(a.start),
                                      .end_ns = shift(a.end), .bytes = a.bytes,
                                      .copy_kind = static_cast<schema::CopyKind>(a.copy_kind),
                                      .src_kind = static_cast<schema::MemoryKind>(a.src_kind),
                                      .dst_kind = static_cast<schema::MemoryKind>(a.dst_kind),
                                      .correlation_id = corr});
    } else {
      b_.add(instrument::MemsetRecord{.rank = rank, .stream = stream, .start_ns = shift(a.start),
                                      .end_ns = shift(a.end), .bytes = a.bytes,
                                      .value = std::nullopt,  // Kineto does not record the value
                                      .correlation_id = corr});
    }
  }

  void sync(const ParsedFile& p, const SyncActivity& y) {
    const RankId rank = rank_of(p, y.device);
    auto stream = [&](std::int64_t s) { return s >= 0 ? b_.stream(rank, device(p, y.device), s) : StreamId(); };
    b_.add(instrument::SyncRecord{.rank = rank, .stream = stream(y.stream), .start_ns = shift(y.start),
                                  .end_ns = shift(y.end), .kind = y.kind, .correlation_id = y.correlation,
                                  .wait_stream = stream(y.event_record_correlation > 0 ? y.wait_on_stream : -1),
                                  .event_record_correlation_id = std::max<std::int64_t>(0, y.event_record_correlation)});
  }

  void api(const ParsedFile& p, const ApiCall& a) {
    b_.add(instrument::ApiCallRecord{
        .rank = rank_of(p, a.pid), .thread_id = a.tid, .start_ns = shift(a.start), .end_ns = shift(a.end),
        .api = a.driver ? schema::ApiKind::kDriver : schema::ApiKind::kRuntime, .name = name(p, a.name, false),
        .correlation_id = a.correlation != 0 ? a.correlation : flow_id(a.pid, a.tid, a.start)});
  }

  void range(const ParsedFile& p, const CpuRange& a) {
    instrument::NvtxRangeRecord r{
        .rank = rank_of(p, a.pid), .thread_id = a.tid, .start_ns = shift(a.start), .end_ns = shift(a.end)};
    if (a.domain != -2) {
      if (a.domain >= 0) r.domain = name(p, a.domain, false);
      else r.domain = pytorch_ ? *pytorch_ : *(pytorch_ = b_.intern("pytorch"));
    }
    r.name = name(p, a.name, false);
    r.category = a.category;
    if (a.payload) r.payload_int = *a.payload;
    r.autograd_seq = a.sequence;
    r.autograd_backward = a.backward;
    r.input_dims = a.input_dims;
    r.input_types = a.input_types;
    b_.add(std::move(r));
  }

  void memory(const ParsedFile& p, const MemoryEvent& m) {
    instrument::MemoryEventRecord r;
    r.rank = rank_of(p, m.pid);
    r.ts_ns = shift(m.ts);
    r.alloc = m.bytes > 0;
    r.bytes = m.bytes < 0 ? -m.bytes : m.bytes;
    r.address = static_cast<std::uint64_t>(m.address);
    r.memory_kind = schema::MemoryKind::kDevice;
    b_.add(r);
  }

  std::string path_, label_;
  std::size_t index_;
  TraceBuilder& b_;
  std::future<std::optional<Tail>> tail_future_;
  std::optional<Tail> tail_;
  bool decided_ = false, streaming_ = false, gpu_written_ = false;
  // What the batches were written with (checked by finish).
  std::optional<std::int64_t> rank_;
  std::int64_t base_ = 0;
  RankId file_rank_;
  std::map<std::int64_t, RankId> export_ranks_;
  std::map<std::int32_t, DeviceId> devices_by_id_;
  std::vector<std::optional<StringId>> names_;  // by the file's string id
  std::optional<StringId> pytorch_;
  std::unordered_map<FlowKey, std::int64_t, FlowKeyHash> flow_at_;
  std::map<std::pair<std::int64_t, std::int64_t>, OpId> op_ids_;  // (pid, op id in the file) -> id written
  std::vector<CpuRange> comm_ranges_;
  std::vector<ApiCall> launches_;
};

}  // namespace

void import_files(const std::vector<std::string>& paths, TraceBuilder& builder, int threads, bool read_tails) {
  if (read_tails) {
    // Each file written while it is parsed (on all cores), its last bytes
    // read (a gzip file inflated) on a thread of its own meanwhile; a small
    // gzip file inflated once for both.
    for (std::size_t i = 0; i < paths.size(); ++i) {
      std::optional<Bytes> text = inflate_small(paths[i]);
      std::future<std::optional<Tail>> tail;
      if (text) {
        std::promise<std::optional<Tail>> known;
        known.set_value(tail_of(view(*text)));
        tail = known.get_future();
      } else {
        tail = std::async(std::launch::async, read_tail, paths[i]);
      }
      FileWriter writer(paths[i], i, builder, std::move(tail));
      auto parsed = parse(paths[i], builder, threads, &writer, std::move(text));
      writer.finish(parsed);
    }
    return;
  }
  // Each file parsed whole, the next while one is written (two parsed files
  // in memory at most); an error comes after the files before it.
  std::future<ParsedFile> next;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    FileWriter writer(paths[i], i, builder);
    auto parsed = i == 0 ? parse(paths[i], builder, threads) : next.get();
    if (i + 1 < paths.size())
      next = std::async(std::launch::async, [&paths, &builder, threads, i] {
        return parse(paths[i + 1], builder, threads);
      });
    writer.finish(parsed);
  }
}

}  // namespace moetrace::importers::kineto
