#include "moetrace/export/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"

namespace moetrace::exporters {
namespace {

using analyzer::Trace;

// JSON string literal; invalid UTF-8 becomes U+FFFD so that strict parsers
// (Python's json, Perfetto) accept names from any source.
void quote(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      const int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
      bool ok = len > 0 && i + static_cast<std::size_t>(len) <= s.size();
      for (int k = 1; ok && k < len; ++k)
        ok = (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s.substr(i, static_cast<std::size_t>(len)));
        i += static_cast<std::size_t>(len);
      } else {
        out += "\xEF\xBF\xBD";
        ++i;
      }
    }
  }
  out += '"';
}

// ns since the origin as microseconds with three decimals.
void micros(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  out += fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

std::string_view copy_kind_name(std::uint8_t k) {
  const auto name = schema::copy_kind_abbreviation(static_cast<schema::CopyKind>(k));
  return name.empty() ? "unknown" : name;
}

std::string_view memory_kind_name(schema::MemoryKind k) {
  switch (k) {
    case schema::MemoryKind::kDevice: return "device";
    case schema::MemoryKind::kPinnedHost: return "pinned host";
    case schema::MemoryKind::kManaged: return "managed";
    case schema::MemoryKind::kPageableHost: return "pageable host";
    default: return "unknown";
  }
}

enum class SliceType : std::uint8_t { kActivity, kOp, kApi, kNvtx };

struct Slice {
  std::int64_t start = 0, end = 0;
  std::int32_t track = 0;
  std::int32_t lane = 0;
  std::int32_t index = 0;  // into the trace's vector of that type
  SliceType type = SliceType::kActivity;
};

struct Track {
  std::int32_t pid = 0;
  std::string name;
  std::int64_t sort = 0;
  std::vector<std::int32_t> lane_tids;
};

struct CollectiveArgs {
  std::string name, dtype, group_ranks;
  std::int64_t in_nelems = -1, out_nelems = -1, group_size = -1;
};

// The trace's collectives (Kineto NCCL kernel args) that name a launch,
// keyed by (rank, correlation id).
std::map<std::pair<std::int32_t, std::int64_t>, CollectiveArgs> collective_args(const Trace& t) {
  std::map<std::pair<std::int32_t, std::int64_t>, CollectiveArgs> out;
  for (const auto& c : t.collectives) {
    if (c.correlation_id <= 0) continue;
    out[{c.rank.value, c.correlation_id}] =
        CollectiveArgs{c.name, c.dtype, c.group_ranks, c.in_nelems, c.out_nelems, c.group_size};
  }
  return out;
}

class Exporter {
 public:
  Exporter(const Trace& t, const std::string& path, std::ostream& out)
      : t_(t), path_(path), os_(out), collectives_(collective_args(t)) {}

  ChromeExportStats run() {
    build_tracks();
    assign_lanes();
    find_origin();
    buf_ += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"moetrace_trace\":";
    quote(buf_, path_);
    buf_ += fmt::format(",\"backend\":");
    quote(buf_, t_.run.backend);
    // baseTimeNanoseconds (Kineto's key): `moetrace import` of this file
    // puts every event back at its absolute ns time.
    buf_ += fmt::format(",\"time_origin_ns\":{}}},\"baseTimeNanoseconds\":{},\n\"traceEvents\":[", origin_,
                        origin_);
    write_metadata();
    write_slices();
    write_nvtx_instants();
    write_counters();
    write_flows();
    buf_ += "\n]}\n";
    flush(true);
    if (!os_) throw Error("writing the Chrome trace failed (disk full?)");
    return stats_;
  }

 private:
  std::int32_t track(std::map<std::tuple<int, std::int32_t, std::int64_t>, std::int32_t>& index, int kind,
                     std::int32_t pid, std::int64_t key, const std::string& name, std::int64_t sort) {
    auto [it, inserted] = index.try_emplace({kind, pid, key}, static_cast<std::int32_t>(tracks_.size()));
    if (inserted) tracks_.push_back(Track{pid, name, sort, {}});
    return it->second;
  }

  void build_tracks() {
    std::map<std::tuple<int, std::int32_t, std::int64_t>, std::int32_t> index;
    for (std::size_t s = 0; s < t_.streams.size(); ++s) {
      const auto& st = t_.streams[s];
      const std::string base = (st.name.empty() ? "stream " + std::to_string(st.id.value) : st.name) +
                               " (" + (st.role.empty() ? "other" : st.role) + ")";
      const auto sort = static_cast<std::int64_t>(s) * 2;
      for (const auto& a : t_.track_activities(s)) {
        const auto tr = track(index, 0, st.rank.value, st.id.value, base, sort);
        slices_.push_back({a.start_ns, a.end_ns, tr, 0,
                           static_cast<std::int32_t>(&a - t_.activities.data()), SliceType::kActivity});
      }
      for (const auto& op : t_.track_ops(s)) {
        const auto tr = track(index, 1, st.rank.value, st.id.value, base + " ops", sort + 1);
        slices_.push_back({op.start_ns, op.end_ns, tr, 0, static_cast<std::int32_t>(&op - t_.ops.data()),
                           SliceType::kOp});
      }
    }
    const std::int64_t host_sort = 1 << 30;
    for (std::size_t i = 0; i < t_.api_calls.size(); ++i) {
      const auto& a = t_.api_calls[i];
      const auto tr = track(index, 2, a.rank.value, a.thread_id, "thread " + std::to_string(a.thread_id) + " (CUDA API)",
                            host_sort + a.thread_id * 2);
      slices_.push_back({a.start_ns, a.end_ns, tr, 0, static_cast<std::int32_t>(i), SliceType::kApi});
    }
    for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
      const auto& r = t_.nvtx[i];
      const auto tr = track(index, 3, r.rank.value, r.thread_id, "thread " + std::to_string(r.thread_id) + " (ranges)",
                            host_sort + r.thread_id * 2 + 1);
      if (r.end_ns < 0) {
        open_nvtx_.emplace_back(tr, static_cast<std::int32_t>(i));
        continue;
      }
      slices_.push_back({r.start_ns, r.end_ns, tr, 0, static_cast<std::int32_t>(i), SliceType::kNvtx});
    }
  }

  // Chrome slices on one thread must nest. Each slice goes to the first lane
  // where it nests in, or follows, what is open there.
  void assign_lanes() {
    std::vector<std::int32_t> order(slices_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      const auto& x = slices_[static_cast<std::size_t>(a)];
      const auto& y = slices_[static_cast<std::size_t>(b)];
      return std::tie(x.track, x.start, y.end) < std::tie(y.track, y.start, x.end);
    });
    std::vector<std::vector<std::int64_t>> lanes;  // open slice ends per lane
    std::int32_t current = -1;
    for (auto i : order) {
      auto& s = slices_[static_cast<std::size_t>(i)];
      if (s.track != current) {
        current = s.track;
        lanes.clear();
      }
      std::size_t lane = 0;
      for (;; ++lane) {
        if (lane == lanes.size()) lanes.emplace_back();
        auto& open = lanes[lane];
        while (!open.empty() && open.back() <= s.start) open.pop_back();
        if (open.empty() || s.end <= open.back()) {
          open.push_back(s.end);
          break;
        }
      }
      s.lane = static_cast<std::int32_t>(lane);
      auto& tr = tracks_[static_cast<std::size_t>(s.track)];
      while (tr.lane_tids.size() <= lane) tr.lane_tids.push_back(0);
    }
    // Thread order within a process: streams (with their ops beside them),
    // then host threads; as small ordinals, since viewers read int32.
    std::vector<std::size_t> by_sort(tracks_.size());
    for (std::size_t i = 0; i < by_sort.size(); ++i) by_sort[i] = i;
    std::sort(by_sort.begin(), by_sort.end(),
              [&](std::size_t a, std::size_t b) { return tracks_[a].sort < tracks_[b].sort; });
    sort_rank_.assign(tracks_.size(), 0);
    for (std::size_t i = 0; i < by_sort.size(); ++i) sort_rank_[by_sort[i]] = static_cast<std::int64_t>(i);
    std::int32_t tid = 1;
    for (auto& tr : tracks_) {
      if (tr.lane_tids.empty()) tr.lane_tids.push_back(0);
      for (auto& l : tr.lane_tids) l = tid++;
      stats_.extra_lanes += static_cast<std::int64_t>(tr.lane_tids.size()) - 1;
    }
  }

  void find_origin() {
    origin_ = INT64_MAX;
    for (const auto& s : slices_) origin_ = std::min(origin_, s.start);
    for (const auto& [tr, i] : open_nvtx_) origin_ = std::min(origin_, t_.nvtx[static_cast<std::size_t>(i)].start_ns);
    for (const auto& m : t_.memory_events) origin_ = std::min(origin_, m.ts_ns);
    if (origin_ == INT64_MAX) origin_ = 0;
  }

  // Events are separated, not terminated, by commas (JSON has no trailing comma).
  void next_event() {
    if (!first_event_) buf_ += ",\n";
    first_event_ = false;
  }

  void flush(bool force = false) {
    if (buf_.size() < (1 << 20) && !force) return;
    os_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

  void write_metadata() {
    std::map<std::int32_t, std::string> processes;
    for (const auto& r : t_.ranks) {
      std::string name = "rank " + std::to_string(r.rank.value);
      for (const auto& d : t_.devices)
        if (d.id == r.device && !d.name.empty()) name += " (" + d.name + ")";
      processes[r.rank.value] = name;
    }
    for (const auto& tr : tracks_)
      if (!processes.count(tr.pid)) processes[tr.pid] = "rank " + std::to_string(tr.pid);
    for (const auto& [pid, name] : processes) {
      next_event();
      buf_ += fmt::format("{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_name\",\"args\":{{\"name\":", pid);
      quote(buf_, name);
      buf_ += fmt::format("}}}},\n{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_sort_index\","
                          "\"args\":{{\"sort_index\":{}}}}}",
                          pid, pid);
    }
    std::set<std::int32_t> memory_pids;
    for (const auto& m : t_.memory_events)
      if (m.memory_kind == schema::MemoryKind::kDevice) memory_pids.insert(m.rank.value);
    for (const auto pid : memory_pids) {
      next_event();
      buf_ += fmt::format("{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\","
                          "\"args\":{{\"name\":\"memory events\"}}}}",
                          pid, kMemoryTid);
    }
    for (const auto& tr : tracks_)
      for (std::size_t lane = 0; lane < tr.lane_tids.size(); ++lane) {
        next_event();
      buf_ += fmt::format("{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":",
                            tr.pid, tr.lane_tids[lane]);
        quote(buf_, lane == 0 ? tr.name : tr.name + " #" + std::to_string(lane + 1));
        buf_ += fmt::format("}}}},\n{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_sort_index\","
                            "\"args\":{{\"sort_index\":{}}}}}",
                            tr.pid, tr.lane_tids[lane], sort_rank_.at(&tr - tracks_.data()) * 64 + static_cast<std::int64_t>(lane));
      }
  }

  std::int32_t tid_of(const Slice& s) const {
    return tracks_[static_cast<std::size_t>(s.track)].lane_tids[static_cast<std::size_t>(s.lane)];
  }

  void slice_head(const Slice& s, std::string_view name, std::string_view cat) {
    const auto& tr = tracks_[static_cast<std::size_t>(s.track)];
    next_event();
      buf_ += "{\"ph\":\"X\",\"cat\":\"";
    buf_ += cat;
    buf_ += "\",\"name\":";
    quote(buf_, name);
    buf_ += fmt::format(",\"pid\":{},\"tid\":{},\"ts\":", tr.pid, tid_of(s));
    micros(buf_, s.start - origin_);
    buf_ += ",\"dur\":";
    micros(buf_, s.end - s.start);
    buf_ += ",\"args\":{";
  }

  static void opt_int(std::string& out, std::string_view key, std::int64_t v, bool& first) {
    out += first ? "\"" : ",\"";
    first = false;
    out += key;
    out += v < 0 ? "\":null" : fmt::format("\":{}", v);
  }

  void write_slices() {
    for (const auto& s : slices_) {
      const auto i = static_cast<std::size_t>(s.index);
      bool first = true;
      switch (s.type) {
        case SliceType::kActivity: {
          const auto& a = t_.activities[i];
          ++stats_.activity_slices;
          if (a.type == analyzer::ActivityType::kKernel) {
            slice_head(s, t_.str(a.name), "kernel");
            if (a.correlation_id) opt_int(buf_, "correlation", a.correlation_id, first);
            if (const auto* lc = t_.launch_config(a)) {
              buf_ += fmt::format("{}\"grid\":[{},{},{}],\"block\":[{},{},{}]", first ? "" : ",", lc->grid[0],
                                  lc->grid[1], lc->grid[2], lc->block[0], lc->block[1], lc->block[2]);
              first = false;
              if (lc->registers >= 0) opt_int(buf_, "registers", lc->registers, first);
              if (lc->shared_bytes >= 0) opt_int(buf_, "shared_bytes", lc->shared_bytes, first);
            }
            auto c = collectives_.find({a.rank.value, a.correlation_id});
            if (a.correlation_id && c != collectives_.end()) {
              buf_ += first ? "\"collective\":" : ",\"collective\":";
              first = false;
              quote(buf_, c->second.name);
              opt_int(buf_, "in_nelems", c->second.in_nelems, first);
              opt_int(buf_, "out_nelems", c->second.out_nelems, first);
              opt_int(buf_, "group_size", c->second.group_size, first);
              if (!c->second.dtype.empty()) {
                buf_ += ",\"dtype\":";
                quote(buf_, c->second.dtype);
              }
              if (!c->second.group_ranks.empty()) {
                buf_ += ",\"group_ranks\":";
                quote(buf_, c->second.group_ranks);
              }
            }
          } else if (a.type == analyzer::ActivityType::kMemcpy) {
            slice_head(s, fmt::format("Memcpy {}", copy_kind_name(a.copy_kind)), "memcpy");
            opt_int(buf_, "bytes", a.bytes, first);
            buf_ += ",\"copy_kind\":";
            quote(buf_, copy_kind_name(a.copy_kind));
            if (a.correlation_id) opt_int(buf_, "correlation", a.correlation_id, first);
          } else {
            slice_head(s, "Memset", "memset");
            opt_int(buf_, "bytes", a.bytes, first);
            if (a.correlation_id) opt_int(buf_, "correlation", a.correlation_id, first);
          }
          if (a.op >= 0) opt_int(buf_, "op", t_.ops[static_cast<std::size_t>(a.op)].id.value, first);
          break;
        }
        case SliceType::kOp: {
          const auto& op = t_.ops[i];
          ++stats_.op_slices;
          const auto kind = op_kind_name(op.kind);
          slice_head(s, op.name.valid() ? t_.str(op.name) : kind, "op");
          buf_ += fmt::format("\"op\":{},\"kind\":", op.id.value);
          quote(buf_, kind);
          first = false;
          opt_int(buf_, "layer", op.layer, first);
          opt_int(buf_, "iteration", op.iteration, first);
          opt_int(buf_, "micro_batch", op.micro_batch, first);
          opt_int(buf_, "chunk", op.chunk, first);
          buf_ += ",\"phase\":";
          quote(buf_, phase_name(op.phase));
          buf_ += ",\"category\":";
          quote(buf_, category_name(op_category(op.kind)));
          if (op.flops >= 0) buf_ += fmt::format(",\"flops\":{}", op.flops);
          if (op.bytes >= 0) opt_int(buf_, "bytes", op.bytes, first);
          if (op.peer.valid()) opt_int(buf_, "peer_rank", op.peer.value, first);
          break;
        }
        case SliceType::kApi: {
          const auto& a = t_.api_calls[i];
          ++stats_.api_slices;
          slice_head(s, t_.str(a.name), "cuda_api");
          opt_int(buf_, "correlation", a.correlation_id, first);
          if (a.api == schema::ApiKind::kDriver) {
            buf_ += first ? "\"api\":\"driver\"" : ",\"api\":\"driver\"";
            first = false;
          }
          if (a.return_code != 0) buf_ += fmt::format(",\"return_code\":{}", a.return_code);
          break;
        }
        case SliceType::kNvtx: {
          const auto& r = t_.nvtx[i];
          ++stats_.nvtx_slices;
          slice_head(s, t_.str(r.name), "nvtx");
          nvtx_args(r, first);
          break;
        }
      }
      buf_ += "}}";
      flush();
    }
  }

  void nvtx_args(const analyzer::NvtxRange& r, bool& first) {
    if (r.domain.valid()) {
      buf_ += first ? "\"domain\":" : ",\"domain\":";
      first = false;
      quote(buf_, t_.str(r.domain));
    }
    if (r.has_payload_int) {
      buf_ += fmt::format("{}\"payload\":{}", first ? "" : ",", r.payload_int);
      first = false;
    }
  }

  void write_nvtx_instants() {
    for (const auto& [tr, i] : open_nvtx_) {
      const auto& r = t_.nvtx[static_cast<std::size_t>(i)];
      const auto& track = tracks_[static_cast<std::size_t>(tr)];
      ++stats_.nvtx_instants;
      next_event();
      buf_ += "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"nvtx\",\"name\":";
      quote(buf_, t_.str(r.name));
      buf_ += fmt::format(",\"pid\":{},\"tid\":{},\"ts\":", track.pid, track.lane_tids[0]);
      micros(buf_, r.start_ns - origin_);
      buf_ += ",\"args\":{\"never_closed\":true";
      bool first = false;
      nvtx_args(r, first);
      buf_ += "}}";
      flush();
    }
  }

  // The thread of a rank's "[memory]" instants, above every stream lane.
  static constexpr std::int32_t kMemoryTid = 1 << 30;

  // Memory in use per rank and memory kind: allocations minus frees so far.
  // Device allocations and frees also as "[memory]" instants in Kineto's form
  // (args Bytes, signed; Addr; Device Type 1 = CUDA), which the importer reads.
  void write_counters() {
    std::map<std::pair<std::int32_t, schema::MemoryKind>, std::int64_t> in_use;
    for (const auto& m : t_.memory_events) {
      auto& v = in_use[{m.rank.value, m.memory_kind}];
      v += m.alloc ? m.bytes : -m.bytes;
      ++stats_.counter_events;
      next_event();
      buf_ += "{\"ph\":\"C\",\"name\":";
      quote(buf_, fmt::format("{} memory", memory_kind_name(m.memory_kind)));
      buf_ += fmt::format(",\"pid\":{},\"ts\":", m.rank.value);
      micros(buf_, m.ts_ns - origin_);
      buf_ += fmt::format(",\"args\":{{\"bytes\":{}}}}}", v);
      flush();
      if (m.memory_kind != schema::MemoryKind::kDevice) continue;
      ++stats_.memory_instants;
      next_event();
      buf_ += fmt::format("{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"memory\",\"name\":\"[memory]\",\"pid\":{},\"tid\":{},"
                          "\"ts\":",
                          m.rank.value, kMemoryTid);
      micros(buf_, m.ts_ns - origin_);
      buf_ += fmt::format(",\"args\":{{\"Bytes\":{},\"Addr\":{},\"Device Type\":1}}}}",
                          m.alloc ? m.bytes : -m.bytes, m.address);
      flush();
    }
  }

  // Launch arrows: API call -> each activity with its correlation id on the
  // same rank (correlation ids are per process, so never across ranks).
  void write_flows() {
    std::unordered_map<std::int64_t, std::vector<const Slice*>> api_by_corr;
    for (const auto& s : slices_)
      if (s.type == SliceType::kApi) {
        const auto& a = t_.api_calls[static_cast<std::size_t>(s.index)];
        if (a.correlation_id != 0) api_by_corr[a.correlation_id].push_back(&s);
      }
    std::int64_t id = 0;
    for (const auto& s : slices_) {
      if (s.type != SliceType::kActivity) continue;
      const auto& a = t_.activities[static_cast<std::size_t>(s.index)];
      if (a.correlation_id == 0) continue;
      auto it = api_by_corr.find(a.correlation_id);
      if (it == api_by_corr.end()) continue;
      const Slice* api = nullptr;
      for (const auto* c : it->second)
        if (t_.api_calls[static_cast<std::size_t>(c->index)].rank == a.rank) api = c;
      if (!api) continue;
      ++id;
      ++stats_.flows;
      const auto& api_track = tracks_[static_cast<std::size_t>(api->track)];
      next_event();
      buf_ += fmt::format("{{\"ph\":\"s\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":{},\"pid\":{},\"tid\":{},\"ts\":",
                          id, api_track.pid, tid_of(*api));
      micros(buf_, api->start - origin_);
      const auto& track = tracks_[static_cast<std::size_t>(s.track)];
      buf_ += fmt::format("}},\n{{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":{},"
                          "\"pid\":{},\"tid\":{},\"ts\":",
                          id, track.pid, tid_of(s));
      micros(buf_, s.start - origin_);
      buf_ += "}";
      flush();
    }
  }

  const Trace& t_;
  std::string path_;
  std::ostream& os_;
  std::map<std::pair<std::int32_t, std::int64_t>, CollectiveArgs> collectives_;
  std::vector<Track> tracks_;
  std::vector<std::int64_t> sort_rank_;  // per track: its place in thread order
  std::vector<Slice> slices_;
  std::vector<std::pair<std::int32_t, std::int32_t>> open_nvtx_;  // (track, nvtx index)
  std::int64_t origin_ = 0;
  std::string buf_;
  bool first_event_ = true;
  ChromeExportStats stats_;
};

}  // namespace

ChromeExportStats write_chrome_trace(const analyzer::Trace& trace, const std::string& trace_path,
                                     std::ostream& out) {
  return Exporter(trace, trace_path, out).run();
}

}  // namespace moetrace::exporters
