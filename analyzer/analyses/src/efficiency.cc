#include "moetrace/analyzer/efficiency.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/dtype.h"
#include "moetrace/analyzer/gemm_shape.h"
#include "moetrace/analyzer/interval.h"
#include "op_intervals.h"

namespace moetrace::analyzer {

namespace {

std::vector<RankDevice> rank_devices(const Trace& trace) {
  std::vector<RankDevice> out;
  std::vector<std::string> keys;
  for (const auto r : trace.rank_ids()) {
    RankDevice d;
    d.rank = r.value;
    DeviceId id;
    for (const auto& rk : trace.ranks)
      if (rk.rank == r) id = rk.device;
    if (!id.valid())
      for (const auto& s : trace.streams)
        if (s.rank == r && s.device.valid()) {
          id = s.device;
          break;
        }
    for (const auto& dev : trace.devices)
      if (dev.id == id) {
        d.device = dev.name;
        d.peaks = find_gpu_peaks(dev.name, dev.compute_major, dev.compute_minor, dev.sm_count, dev.memory_bytes);
        break;
      }
    // One GPU: by its UUID where recorded, else by host and device id.
    std::string host;
    for (const auto& rk : trace.ranks)
      if (rk.rank == r) host = rk.host;
    std::string gpu = host + "/" + std::to_string(id.value);
    for (const auto& dev : trace.devices)
      if (dev.id == id && !dev.uuid.empty()) gpu = dev.uuid;
    keys.push_back(std::move(gpu));
    out.push_back(std::move(d));
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i].shared = std::count(keys.begin(), keys.end(), keys[i]) > 1;
  return out;
}

void find_dtype(const Trace& trace, EfficiencyAnalysis& e) {
  for (const char* key : {"torch_dtype", "dtype", "params_dtype"}) {
    const auto v = trace.config_value(key);
    if (v.empty()) continue;
    if (const auto d = parse_peak_dtype(v)) {
      e.dtype = *d;
      e.dtype_assumed = false;
      e.dtype_source = std::string("run config ") + key + "=" + std::string(v);
      return;
    }
  }
  // The expert GEMMs' recorded input types (PyTorch profiler with
  // record_shapes: "c10::BFloat16"), the first operand's, the most common.
  if (!trace.input_shapes.empty()) {
    const LaunchShapes shapes(trace);
    std::map<PeakDtype, std::int64_t> seen;
    for (const auto& a : trace.activities) {
      if (a.op < 0 || op_category(trace.ops[static_cast<std::size_t>(a.op)].kind) != Category::kExpertCompute) continue;
      const auto range = shapes.range_of(a);
      if (!range) continue;
      const auto shape = trace.nvtx[*range].input_shape;
      if (shape < 0) continue;
      const auto& types = trace.input_shapes[static_cast<std::size_t>(shape)].types;
      const auto open = types.find('"');
      const auto close = open == std::string::npos ? open : types.find('"', open + 1);
      if (close == std::string::npos) continue;
      if (const auto d = parse_peak_dtype(std::string_view(types).substr(open + 1, close - open - 1))) ++seen[*d];
    }
    if (!seen.empty()) {
      const auto best = std::max_element(seen.begin(), seen.end(),
                                         [](const auto& x, const auto& y) { return x.second < y.second; });
      std::int64_t total = 0;
      for (const auto& [d, n] : seen) total += n;
      e.dtype = best->first;
      e.dtype_assumed = false;
      e.dtype_source = "the recorded input types of " + std::to_string(best->second) + " of " +
                       std::to_string(total) + " expert kernels' framework ops";
      return;
    }
  }
  if (const auto b = trace.config_int("elem_bytes"); b && (*b == 1 || *b == 2 || *b == 4)) {
    e.dtype = *b == 1 ? PeakDtype::kFp8 : *b == 2 ? PeakDtype::kBf16 : PeakDtype::kFp32;
    e.dtype_assumed = false;
    e.dtype_source = "run config elem_bytes=" + std::to_string(*b) + (*b == 2 ? " (BF16 and FP16 peaks are equal)" : "");
    return;
  }
  e.dtype = PeakDtype::kBf16;
  e.dtype_assumed = true;
  e.dtype_source = "no dtype recorded: BF16 assumed";
}

const Collective* collective_record(const Trace& t, RankId rank, std::int64_t corr) {
  if (corr == 0) return nullptr;
  const auto it = std::lower_bound(t.collectives.begin(), t.collectives.end(), std::pair(rank.value, corr),
                                   [](const Collective& c, const std::pair<std::int32_t, std::int64_t>& k) {
                                     return std::pair(c.rank.value, c.correlation_id) < k;
                                   });
  return it != t.collectives.end() && it->rank == rank && it->correlation_id == corr ? &*it : nullptr;
}

std::int64_t record_bytes(const Collective* c) {
  if (!c || c->in_nelems < 0) return -1;
  const auto eb = dtype_bytes(c->dtype);
  return eb ? c->in_nelems * *eb : -1;
}

std::int32_t recorded_group(const Collective* c) { return c && c->recorded_ranks() > 0 ? c->recorded_ranks() : -1; }

// n: the instance's participants, else the recorded group, else the run's world size.
int group_size(int participants, std::int32_t recorded, std::int32_t world_size) {
  if (participants >= 2) return participants;
  if (recorded > 0) return recorded;
  return world_size > 1 ? world_size : -1;
}

// Which collective (if any) a category is.
std::string_view comm_kind(Category c) {
  return c == Category::kAllToAll ? "all_to_all" : c == Category::kAllReduce ? "all_reduce" : "";
}

class Calculator {
 public:
  // `calls` (collective_calls' of the trace) must outlive the calculator.
  Calculator(const Trace& t, const std::vector<CollectiveCall>& calls,
             const std::unordered_map<std::uint64_t, int>* participants = nullptr)
      : t_(t), first_activity_(t.ops.size(), -1), participants_(t.ops.size(), 0), calls_(calls) {
    for (std::size_t i = 0; i < t.activities.size(); ++i)
      if (const auto op = t.activities[i].op; op >= 0 && first_activity_[static_cast<std::size_t>(op)] < 0)
        first_activity_[static_cast<std::size_t>(op)] = static_cast<std::int32_t>(i);
    for (std::size_t i = 0; i < calls_.size();) {
      std::size_t j = i;
      while (j < calls_.size() && calls_[j].key == calls_[i].key) ++j;
      int n = static_cast<int>(j - i);
      if (participants)
        if (const auto it = participants->find(calls_[i].key); it != participants->end()) n = it->second;
      for (std::size_t k = i; k < j; ++k)
        if (const auto op = op_of(calls_[k]); op >= 0) participants_[static_cast<std::size_t>(op)] = n;
      i = j;
    }
  }

  const std::vector<CollectiveCall>& calls() const { return calls_; }
  // The op range of a call: its own, or its NCCL kernel's; -1: none.
  std::int32_t op_of(const CollectiveCall& c) const {
    if (c.op >= 0) return c.op;
    return c.activity >= 0 ? t_.activities[static_cast<std::size_t>(c.activity)].op : -1;
  }

  const Collective* record_of_op(std::size_t op) const {
    const auto a = first_activity_[op];
    return a < 0 ? nullptr : collective_record(t_, t_.ops[op].rank, t_.activities[static_cast<std::size_t>(a)].correlation_id);
  }
  std::int64_t op_bytes(std::size_t op) const {
    const auto& o = t_.ops[op];
    if (o.bytes >= 0) return o.bytes;
    if (o.recv_bytes >= 0) return o.recv_bytes;
    return record_bytes(record_of_op(op));
  }
  int op_group_size(std::size_t op) const {
    return group_size(participants_[op], recorded_group(record_of_op(op)), t_.run.world_size);
  }

 private:
  const Trace& t_;
  std::vector<std::int32_t> first_activity_;  // per op (activities are indexed in 32 bits, as Activity::launched_by)
  std::vector<int> participants_;
  const std::vector<CollectiveCall>& calls_;
};

struct CommAcc {
  CommFigures f;
  std::vector<Interval> iv;
  double bus_bytes = 0;
  std::int64_t bus_ops = 0;
};

struct RowAcc {
  GemmFigures g;
  std::vector<Interval> flops_iv, all_iv;
  CommAcc a2a, ar;
};

void add_comm(CommAcc& c, const Calculator& calc, const OpIntervals& intervals, std::size_t op, std::string_view kind) {
  ++c.f.ops;
  const auto bytes = calc.op_bytes(op);
  if (bytes < 0 || intervals.busy(op) <= 0) return;  // no size, or no time (an op that did nothing)
  ++c.f.ops_with_bytes;
  c.f.bytes = std::max<std::int64_t>(c.f.bytes, 0) + bytes;
  for (const auto i : intervals.of(op)) c.iv.push_back(i);
  const int n = calc.op_group_size(op);
  if (n >= 1) {
    c.f.group_size = std::max(c.f.group_size, n);
    c.bus_bytes += static_cast<double>(bytes) * busbw_factor(kind, n);
    ++c.bus_ops;
  }
}

void finish_comm(CommAcc& c) {
  c.f.time_ns = IntervalSet::from(std::move(c.iv)).length();
  if (c.f.bytes < 0 || c.f.time_ns <= 0) return;
  const auto ns = static_cast<double>(c.f.time_ns);
  c.f.algbw_gbps = static_cast<double>(c.f.bytes) / ns;
  if (c.bus_ops == c.f.ops_with_bytes) c.f.busbw_gbps = c.bus_bytes / ns;
}

// A row's peaks: the GPU's for the dtype, its link's where the rank has a
// GPU of its own.
void apply_peaks(EfficiencyRow& r, const RankDevice& device, PeakDtype dtype) {
  auto& g = r.expert;
  g.peak_tflops = g.percent_of_peak = -1;
  if (device.peaks)
    if (const auto p = device.peaks->tflops(dtype)) {
      g.peak_tflops = *p;
      if (g.achieved_tflops >= 0) g.percent_of_peak = 100.0 * g.achieved_tflops / *p;
    }
  for (auto* c : {&r.all_to_all, &r.all_reduce}) {
    c->link_gbps = c->percent_of_link = -1;
    if (device.peaks && device.peaks->link_gbps && !device.shared && c->algbw_gbps >= 0) {
      c->link_gbps = *device.peaks->link_gbps;
      if (c->busbw_gbps >= 0) c->percent_of_link = 100.0 * c->busbw_gbps / c->link_gbps;
    }
  }
}

EfficiencyRow finish_row(std::int32_t rank, std::int32_t layer, RowAcc& a, const RankDevice& device, PeakDtype dtype) {
  EfficiencyRow r;
  r.rank = rank;
  r.layer = layer;
  r.expert = a.g;
  auto& g = r.expert;
  g.time_ns = IntervalSet::from(std::move(g.ops_with_flops > 0 ? a.flops_iv : a.all_iv)).length();
  if (g.flops >= 0 && g.time_ns > 0) g.achieved_tflops = g.flops / static_cast<double>(g.time_ns) / 1e3;
  finish_comm(a.a2a);
  finish_comm(a.ar);
  r.all_to_all = a.a2a.f;
  r.all_reduce = a.ar.f;
  apply_peaks(r, device, dtype);
  return r;
}

std::int64_t median(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  const auto lower = *std::max_element(v.begin(), mid);
  return (lower + *mid) / 2;
}

struct BucketAcc {
  CollectiveBucket b;
  std::vector<std::int64_t> waits, transfers;
  double bus_bytes = 0;
  bool bus_known = true;
};

std::vector<CollectiveCallSize> call_sizes(const Trace& trace, const Calculator& calc) {
  std::vector<CollectiveCallSize> out;
  out.reserve(calc.calls().size());
  for (const auto& c : calc.calls()) {
    CollectiveCallSize z;
    const Collective* record = nullptr;
    if (const auto op_index = calc.op_of(c); op_index >= 0) {
      const auto op = static_cast<std::size_t>(op_index);
      z.kind = comm_kind(op_category(trace.ops[op].kind));
      z.bytes = calc.op_bytes(op);
      record = calc.record_of_op(op);
    } else if (c.activity >= 0) {
      const auto& a = trace.activities[static_cast<std::size_t>(c.activity)];
      z.kind = comm_kind(classify_activity(trace, a));
      record = collective_record(trace, a.rank, a.correlation_id);
      z.bytes = record_bytes(record);
    }
    z.recorded_group = recorded_group(record);
    out.push_back(z);
  }
  return out;
}

// The link bounds the collectives only where every rank has a GPU of its
// own, all the same entry of the table: that entry, else nullptr.
const GpuPeaks* common_link(const std::vector<RankDevice>& devices) {
  const GpuPeaks* common = nullptr;
  bool first = true;
  for (const auto& d : devices) {
    const GpuPeaks* link = d.shared ? nullptr : d.peaks;
    if (first) common = link;
    else if (common != link) common = nullptr;
    first = false;
  }
  return common;
}

void collective_buckets(const std::vector<CollectiveCall>& calls, const std::vector<CollectiveCallSize>& sizes,
                        std::int32_t world_size, const GpuPeaks* common, EfficiencyAnalysis& e) {
  std::map<std::pair<std::string_view, std::int64_t>, BucketAcc> buckets;
  for (std::size_t i = 0; i < calls.size();) {
    std::size_t j = i;
    while (j < calls.size() && calls[j].key == calls[i].key) ++j;
    const auto n = j - i;
    std::string_view kind;
    std::int64_t largest = -1, last_ready = INT64_MIN;
    for (std::size_t k = i; k < j; ++k) {
      if (!sizes[k].kind.empty()) kind = sizes[k].kind;
      largest = std::max(largest, sizes[k].bytes);
      last_ready = std::max(last_ready, calls[k].ready_ns);
    }
    if (!kind.empty()) {
      const std::int64_t min_bytes = largest < 0 ? -1 : largest == 0 ? 0 : std::int64_t{1} << std::bit_width(static_cast<std::uint64_t>(largest)) >> 1;
      auto& acc = buckets[{kind, min_bytes}];
      acc.b.kind = std::string(kind);
      acc.b.min_bytes = min_bytes;
      ++acc.b.instances;
      for (std::size_t k = i; k < j; ++k) {
        const auto& c = calls[k];
        const auto duration = std::max<std::int64_t>(0, c.end_ns - c.start_ns);
        const auto wait = n >= 2 ? std::clamp<std::int64_t>(last_ready - c.start_ns, 0, duration) : 0;
        const auto transfer = duration - wait;
        ++acc.b.calls;
        if (n < 2) ++acc.b.unpaired_calls;
        acc.waits.push_back(wait);
        acc.transfers.push_back(transfer);
        acc.b.wait_total_ns += wait;
        if (n >= 2) acc.b.skew_total_ns += last_ready - c.ready_ns;
        acc.b.transfer_total_ns += transfer;
        const int g = group_size(static_cast<int>(n), sizes[k].recorded_group, world_size);
        acc.b.group_size = std::max(acc.b.group_size, g);
        if (sizes[k].bytes >= 0 && duration > 0) {
          acc.b.bytes += sizes[k].bytes;
          if (g >= 1) acc.bus_bytes += static_cast<double>(sizes[k].bytes) * busbw_factor(kind, g);
          else acc.bus_known = false;
        } else {
          acc.bus_known = false;
        }
      }
      if (n >= 2) e.wait_separated = true;
    }
    i = j;
  }
  for (auto& [key, acc] : buckets) {
    acc.b.wait_median_ns = median(std::move(acc.waits));
    acc.b.transfer_median_ns = median(std::move(acc.transfers));
    if (acc.bus_known && acc.b.transfer_total_ns > 0) {
      acc.b.busbw_gbps = acc.bus_bytes / static_cast<double>(acc.b.transfer_total_ns);
      if (common && common->link_gbps) acc.b.percent_of_link = 100.0 * acc.b.busbw_gbps / *common->link_gbps;
    }
    e.collectives.push_back(std::move(acc.b));
  }
}

}  // namespace

double busbw_factor(std::string_view kind, int n) {
  if (n < 1) return -1;
  const double f = static_cast<double>(n - 1) / static_cast<double>(n);
  return kind == "all_reduce" ? 2 * f : f;
}

namespace {

// Devices, the GPUs not in the table, and each rank's device.
std::map<std::int32_t, RankDevice> set_devices(const Trace& trace, EfficiencyAnalysis& e) {
  e.devices = rank_devices(trace);
  std::set<std::string> unmatched;
  std::map<std::int32_t, RankDevice> device_of;
  for (const auto& d : e.devices) {
    if (!d.peaks) unmatched.insert(d.device.empty() ? std::string("(no device recorded)") : d.device);
    device_of[d.rank] = d;
  }
  e.unmatched_devices.assign(unmatched.begin(), unmatched.end());
  return device_of;
}

// Each rank's row and its layers' (GEMMs, all-to-all, all-reduce), one
// rank at a time (its rows' intervals held only while it is read), in order
// of rank, its layers in order of layer.
void rank_and_layer_rows(const Trace& trace, const Calculator& calc, std::map<std::int32_t, RankDevice>& device_of,
                         EfficiencyAnalysis& e) {
  const OpIntervals intervals(trace);
  const RankRows by_rank(trace);
  for (std::size_t slot = 0; slot < by_rank.size(); ++slot) {
    const auto ops = by_rank.ops(slot);
    if (ops.empty()) continue;
    const auto rank = by_rank.rank(slot);
    std::map<std::int32_t, RowAcc> layers;
    RowAcc whole;
    for (const auto i : ops) {
      const auto& op = trace.ops[i];
      const auto cat = op_category(op.kind);
      std::array<RowAcc*, 2> rows = {&whole, op.layer >= 0 ? &layers[op.layer] : nullptr};
      if (cat == Category::kExpertCompute) {
        const bool with_flops = op.flops >= 0 && intervals.busy(i) > 0;
        for (auto* r : rows) {
          if (!r) continue;
          ++r->g.ops;
          // A row's GEMM time is that of its ops with FLOPs where it has
          // any (finish_row): every op's intervals kept only until then.
          if (with_flops) {
            if (r->g.ops_with_flops++ == 0) std::vector<Interval>().swap(r->all_iv);
            r->g.flops = std::max(r->g.flops, 0.0) + op.flops;
            for (const auto& iv : intervals.of(i)) r->flops_iv.push_back(iv);
          } else if (r->g.ops_with_flops == 0) {
            for (const auto& iv : intervals.of(i)) r->all_iv.push_back(iv);
          }
        }
      } else if (const auto kind = comm_kind(cat); !kind.empty()) {
        for (auto* r : rows)
          if (r) add_comm(kind == "all_to_all" ? r->a2a : r->ar, calc, intervals, i, kind);
      }
    }
    for (auto& [layer, acc] : layers) e.layers.push_back(finish_row(rank, layer, acc, device_of[rank], e.dtype));
    e.ranks.push_back(finish_row(rank, -1, whole, device_of[rank], e.dtype));
  }
}

}  // namespace

EfficiencyAnalysis analyze_efficiency(const Trace& trace, const std::unordered_map<std::uint64_t, int>* participants) {
  return analyze_efficiency(trace, collective_calls(trace), participants);
}

EfficiencyAnalysis analyze_efficiency(const Trace& trace, const std::vector<CollectiveCall>& calls,
                                      const std::unordered_map<std::uint64_t, int>* participants) {
  EfficiencyAnalysis e;
  find_dtype(trace, e);
  auto device_of = set_devices(trace, e);

  const Calculator calc(trace, calls, participants);
  // The ops' intervals and the ranks' rows held only there, given back
  // before the collectives' figures are put together.
  rank_and_layer_rows(trace, calc, device_of, e);
  // A part of a run: its collectives are the run's (collective_efficiency).
  if (!participants)
    collective_buckets(calc.calls(), call_sizes(trace, calc), trace.run.world_size, common_link(e.devices), e);
  return e;
}

std::vector<CollectiveCallSize> collective_call_sizes(const Trace& trace, const std::vector<CollectiveCall>& calls) {
  return call_sizes(trace, Calculator(trace, calls));
}

void collective_efficiency(const Trace& run, const std::vector<CollectiveCall>& calls,
                           const std::vector<CollectiveCallSize>& sizes, EfficiencyAnalysis& e) {
  collective_buckets(calls, sizes, run.run.world_size, common_link(rank_devices(run)), e);
}

EfficiencyAnalysis merge_efficiency(std::vector<EfficiencyAnalysis> parts, const Trace& run) {
  EfficiencyAnalysis e;
  // The dtype: the run config's where a part took it from there (every part
  // then did), else the one most parts found, else BF16 assumed.
  std::map<PeakDtype, int> found;
  for (const auto& p : parts)
    if (!p.dtype_assumed) ++found[p.dtype];
  e.dtype = PeakDtype::kBf16;
  e.dtype_assumed = true;
  e.dtype_source = "no dtype recorded: BF16 assumed";
  if (!found.empty()) {
    const auto best = std::max_element(found.begin(), found.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    for (const auto& p : parts)
      if (!p.dtype_assumed && p.dtype == best->first) {
        e.dtype = p.dtype;
        e.dtype_assumed = false;
        e.dtype_source = p.dtype_source;
        break;
      }
    if (best->second < static_cast<int>(parts.size()))
      e.dtype_source += fmt::format(" (in {} of the run's {} files)", best->second, parts.size());
  }
  // Devices from the run's union: which ranks share a GPU shows only there.
  auto device_of = set_devices(run, e);
  for (auto& p : parts) {
    for (auto& r : p.layers) e.layers.push_back(std::move(r));
    for (auto& r : p.ranks) e.ranks.push_back(std::move(r));
  }
  auto by_key = [](const EfficiencyRow& x, const EfficiencyRow& y) { return std::tie(x.rank, x.layer) < std::tie(y.rank, y.layer); };
  std::stable_sort(e.layers.begin(), e.layers.end(), by_key);
  std::stable_sort(e.ranks.begin(), e.ranks.end(), by_key);
  for (auto* rows : {&e.layers, &e.ranks})
    for (auto& r : *rows) apply_peaks(r, device_of[r.rank], e.dtype);
  return e;
}

}  // namespace moetrace::analyzer
