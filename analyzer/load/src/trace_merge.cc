// merge_traces(): traces of disjoint ranks into one Trace, as the loader
// would have built it from one file holding them all (run_loader.h).
#include <algorithm>
#include <initializer_list>
#include <charconv>
#include <string_view>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/schema/error.h"
#include "moetrace/analyzer/run_parts.h"

namespace moetrace::analyzer {

template <class T>
static void release(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

class TraceMerger {
 public:
  explicit TraceMerger(std::vector<Trace> parts, detail::MergeIds* ids = nullptr)
      : parts_(std::move(parts)), ids_(ids) {}

  Trace merge() {
    if (parts_.empty()) throw Error("no trace to merge");
    if (ids_) {
      ids_->streams.assign(parts_.size(), {});
      ids_->buffer_base.assign(parts_.size(), 0);
    }
    if (parts_.size() == 1) {
      if (ids_)
        for (const auto& s : parts_.front().streams) ids_->streams[0].emplace_back(s.id.value, s.id.value);
      return std::move(parts_.front());
    }
    merge_run();
    merge_strings();
    merge_devices_ranks();
    merge_streams();
    id_offsets();
    merge_ops_and_activities();
    merge_tables();
    out_.index_launching_calls();
    return std::move(out_);
  }

 private:
  void merge_run() {
    RunInfo& r = out_.run = parts_.front().run;
    for (std::size_t p = 1; p < parts_.size(); ++p) {
      const RunInfo& o = parts_[p].run;
      if (o.start_ns != 0 && (r.start_ns == 0 || o.start_ns < r.start_ns)) r.start_ns = o.start_ns;
      r.end_ns = std::max(r.end_ns, o.end_ns);
      r.dropped_records += o.dropped_records;
      r.finalized = r.finalized && o.finalized;
      r.world_size = std::max(r.world_size, o.world_size);
      r.schema_version = std::min(r.schema_version, o.schema_version);
    }
    merge_file_states(r);
  }

  // What each file warns of stays with its name (RunInfo::file_states); the
  // run's integrity is the files' common one or "mixed", its unread-device
  // counts (import.skipped.*) the sums over the files.
  void merge_file_states(RunInfo& r) const {
    constexpr std::string_view kSkipped = "import.skipped.";
    std::vector<RunInfo::FileState> states;
    std::set<std::string> integrity;
    std::map<std::string, std::int64_t> skipped;
    auto add_skipped = [&](const std::vector<std::pair<std::string, std::string>>& rows) {
      for (const auto& [k, v] : rows) {
        std::int64_t n = 0;
        if (k.starts_with(kSkipped) && std::from_chars(v.data(), v.data() + v.size(), n).ec == std::errc())
          skipped[k] += n;
      }
    };
    for (const auto& part : parts_) {
      const RunInfo& o = part.run;
      integrity.insert(o.integrity);
      if (!o.file_states.empty()) {  // itself a run of several files
        for (const auto& s : o.file_states) add_skipped(s.skipped);
        states.insert(states.end(), o.file_states.begin(), o.file_states.end());
        continue;
      }
      RunInfo::FileState s{o.path, o.integrity, o.damage, o.dropped_records, {}};
      for (const auto& row : o.config)
        if (row.first.starts_with(kSkipped)) s.skipped.push_back(row);
      add_skipped(s.skipped);
      const bool skipped_any = std::any_of(s.skipped.begin(), s.skipped.end(), [](const auto& row) {
        return row.second != "0";
      });
      if (s.integrity == "not recorded" || !s.damage.empty() || s.dropped_records > 0 || skipped_any)
        states.push_back(std::move(s));
    }
    r.file_states = std::move(states);
    r.integrity = integrity.size() == 1 ? *integrity.begin() : "mixed";
    r.damage.clear();
    std::erase_if(r.config, [&](const auto& row) { return row.first.starts_with(kSkipped); });
    for (const auto& [k, n] : skipped) r.config.emplace_back(k, std::to_string(n));
  }

  void merge_strings() {
    std::unordered_map<std::string, std::int32_t> ids;
    strings_.resize(parts_.size());
    std::vector<std::pair<std::int32_t, std::int8_t>> categories;
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      auto& t = parts_[p];
      auto& map = strings_[p];
      map.resize(t.strings.size());
      for (std::size_t i = 0; i < t.strings.size(); ++i) {
        auto [it, inserted] = ids.try_emplace(t.strings[i], static_cast<std::int32_t>(out_.strings.size()));
        if (inserted) out_.strings.push_back(std::move(t.strings[i]));
        map[i] = it->second;
        if (i < t.kernel_category.size() && t.kernel_category[i] >= 0)
          categories.emplace_back(it->second, t.kernel_category[i]);
      }
      release(t.strings);
      release(t.kernel_category);
    }
    out_.kernel_category.assign(out_.strings.size(), -1);
    for (auto [id, c] : categories) out_.kernel_category[static_cast<std::size_t>(id)] = c;
  }
  StringId str(std::size_t p, StringId id) const {
    const auto& map = strings_[p];
    return id.valid() && static_cast<std::size_t>(id.value) < map.size()
               ? StringId(map[static_cast<std::size_t>(id.value)])
               : StringId();
  }

  // Devices are the same device where id, UUID and name agree; another
  // device with a taken id gets the next free one.
  void merge_devices_ranks() {
    std::map<std::tuple<std::int32_t, std::string, std::string>, std::int32_t> known;
    std::set<std::int32_t> used;
    devices_.resize(parts_.size());
    for (std::size_t p = 0; p < parts_.size(); ++p)
      for (const auto& d : parts_[p].devices) used.insert(d.id.value);
    std::set<std::int32_t> taken;
    std::int32_t next = used.empty() ? 0 : *used.rbegin() + 1;
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      for (auto& d : parts_[p].devices) {
        const auto key = std::make_tuple(d.id.value, d.uuid, d.name);
        auto it = known.find(key);
        if (it == known.end()) {
          const std::int32_t id = taken.count(d.id.value) != 0 ? next++ : d.id.value;
          taken.insert(id);
          it = known.emplace(key, id).first;
          Device nd = d;
          nd.id = DeviceId(id);
          out_.devices.push_back(std::move(nd));
        }
        devices_[p][d.id.value] = it->second;
      }
      for (auto& r : parts_[p].ranks) {
        r.device = device(p, r.device);
        out_.ranks.push_back(std::move(r));
      }
    }
    std::sort(out_.devices.begin(), out_.devices.end(), [](const Device& a, const Device& b) { return a.id < b.id; });
    std::stable_sort(out_.ranks.begin(), out_.ranks.end(), [](const Rank& a, const Rank& b) { return a.rank < b.rank; });
  }
  DeviceId device(std::size_t p, DeviceId id) const {
    const auto it = devices_[p].find(id.value);
    return it != devices_[p].end() ? DeviceId(it->second) : id;
  }

  // Streams in (rank, id) order over all parts; ids renumbered where two
  // parts use one.
  void merge_streams() {
    std::set<std::int32_t> seen;
    bool clash = false;
    for (const auto& t : parts_) {
      std::set<std::int32_t> mine;
      for (const auto& s : t.streams) mine.insert(s.id.value);
      for (auto id : mine) clash = !seen.insert(id).second || clash;
    }
    std::int32_t next = 0;
    for (std::size_t p = 0; p < parts_.size(); ++p)
      for (std::size_t i = 0; i < parts_[p].streams.size(); ++i) {
        auto s = parts_[p].streams[i];
        if (clash) s.id = StreamId(next++);
        if (ids_) ids_->streams[p].emplace_back(parts_[p].streams[i].id.value, s.id.value);
        s.device = device(p, s.device);
        order_.push_back({s.rank.value, s.id.value, p, i});
        streams_.push_back(std::move(s));
      }
    std::vector<std::size_t> idx(order_.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return std::tie(order_[a].rank, order_[a].id) < std::tie(order_[b].rank, order_[b].id);
    });
    std::vector<Slot> sorted;
    for (std::size_t n = 0; n < idx.size(); ++n) {
      const Slot& s = order_[idx[n]];
      out_.streams.push_back(std::move(streams_[idx[n]]));
      sorted.push_back(s);
    }
    order_ = std::move(sorted);
    release(streams_);
    out_.stream_index_.clear();
    for (std::size_t i = 0; i < out_.streams.size(); ++i)
      out_.stream_index_.emplace_back(out_.streams[i].id.value, static_cast<std::int32_t>(i));
    std::sort(out_.stream_index_.begin(), out_.stream_index_.end());
    for (std::size_t i = 1; i < out_.stream_index_.size(); ++i)
      if (out_.stream_index_[i].first == out_.stream_index_[i - 1].first)
        throw Error("stream id " + std::to_string(out_.stream_index_[i].first) + " appears twice in one file");
  }

  // Op and buffer ids are kept unless two parts use one; then each part's
  // ids are shifted past the previous part's.
  void id_offsets() {
    auto offsets = [&](auto ids_of) {
      std::vector<std::int64_t> all, base(parts_.size(), 0);
      std::int64_t next = 0;
      for (std::size_t p = 0; p < parts_.size(); ++p) {
        const auto ids = ids_of(parts_[p]);
        all.insert(all.end(), ids.begin(), ids.end());
        base[p] = next;
        if (!ids.empty()) next += *std::max_element(ids.begin(), ids.end()) + 1;
      }
      std::sort(all.begin(), all.end());
      if (std::adjacent_find(all.begin(), all.end()) == all.end()) std::fill(base.begin(), base.end(), 0);
      return base;
    };
    op_base_ = offsets([](const Trace& t) {
      std::vector<std::int64_t> ids;
      for (const auto& [id, i] : t.op_index_) ids.push_back(id);
      return ids;
    });
    buffer_base_ = offsets([](const Trace& t) {
      std::vector<std::int64_t> ids;
      for (const auto& b : t.buffers) ids.push_back(b.id.value);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      return ids;
    });
    if (ids_) ids_->buffer_base = buffer_base_;
  }
  OpId op_id(std::size_t p, OpId id) const { return id.valid() ? OpId(id.value + op_base_[p]) : id; }
  BufferId buffer_id(std::size_t p, BufferId id) const {
    return id.valid() ? BufferId(id.value + buffer_base_[p]) : id;
  }

  // The tracks of `events` (a Trace's ops or activities, each stream's
  // slice [begins[s], begins[s + 1])) of every part into out_, stream by
  // stream in the merged order: event i of part p, the n-th merged stream's,
  // as copy(p, i, event, n) gives it. A part's events are freed after its
  // last stream (last[p]).
  template <class Event, class Copy>
  void merge_tracks(std::vector<Event> Trace::*events, std::vector<std::size_t> Trace::*begins,
                    const std::vector<std::size_t>& last, Copy copy) {
    auto& into = out_.*events;
    auto& into_begins = out_.*begins;
    into_begins.assign(out_.streams.size() + 1, 0);
    for (std::size_t n = 0; n < order_.size(); ++n) {
      const std::size_t p = order_[n].part, s = order_[n].index;
      auto& t = parts_[p];
      const auto& from = t.*events;
      const auto& begin = t.*begins;
      for (std::size_t i = begin[s]; i < begin[s + 1]; ++i) into.push_back(copy(p, i, from[i], n));
      into_begins[n + 1] = into.size();
      if (last[p] == n) release(t.*events);
    }
  }

  // Tracks in the merged stream order: each stream's ops and activities are
  // one part's slice, already sorted. A part's events are freed once its
  // last stream is copied.
  void merge_ops_and_activities() {
    std::vector<std::size_t> last(parts_.size(), 0);
    for (std::size_t n = 0; n < order_.size(); ++n) last[order_[n].part] = n;
    std::vector<std::vector<std::int32_t>> op_map(parts_.size());
    for (std::size_t p = 0; p < parts_.size(); ++p) op_map[p].assign(parts_[p].ops.size(), -1);
    std::size_t ops = 0, activities = 0, launches = 0;
    std::vector<std::int32_t> launch_base(parts_.size(), 0);
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      ops += parts_[p].ops.size();
      activities += parts_[p].activities.size();
      launch_base[p] = static_cast<std::int32_t>(launches);
      launches += parts_[p].launch_configs.size();
    }
    reserve_huge(out_.ops, ops);
    merge_tracks(&Trace::ops, &Trace::op_track_begin, last,
                 [&](std::size_t p, std::size_t i, OpRange op, std::size_t n) {
                   op.id = op_id(p, op.id);
                   op.stream = static_cast<std::int32_t>(n);
                   op.name = str(p, op.name);
                   op_map[p][i] = static_cast<std::int32_t>(out_.ops.size());
                   return op;
                 });
    reserve_huge(out_.activities, activities);
    out_.launch_configs.reserve(launches);
    for (auto& t : parts_) out_.launch_configs.insert(out_.launch_configs.end(), t.launch_configs.begin(), t.launch_configs.end());
    merge_tracks(&Trace::activities, &Trace::activity_track_begin, last,
                 [&](std::size_t p, std::size_t, Activity a, std::size_t n) {
                   a.stream = static_cast<std::int32_t>(n);
                   a.name = str(p, a.name);
                   if (a.op >= 0) a.op = op_map[p][static_cast<std::size_t>(a.op)];
                   if (a.launch >= 0) a.launch += launch_base[p];
                   return a;
                 });
    out_.op_index_.resize(out_.ops.size());
    for (std::size_t i = 0; i < out_.ops.size(); ++i)
      out_.op_index_[i] = {out_.ops[i].id.value, static_cast<std::int32_t>(i)};
    std::sort(out_.op_index_.begin(), out_.op_index_.end());
  }

  void merge_tables() {
    auto& o = out_;
    // Each table sized once for all the parts: grown by doubling, a merge of
    // two small rank files touched (page-faulted) three times their size.
    auto reserve = [this](auto& into, auto Trace::*table) {
      std::size_t n = into.size();
      for (const auto& t : parts_) n += (t.*table).size();
      into.reserve(n);
    };
    reserve(o.api_calls, &Trace::api_calls);
    reserve(o.nvtx, &Trace::nvtx);
    reserve(o.input_shapes, &Trace::input_shapes);
    reserve(o.memory_events, &Trace::memory_events);
    reserve(o.buffers, &Trace::buffers);
    reserve(o.op_buffers, &Trace::op_buffers);
    reserve(o.op_deps, &Trace::op_deps);
    reserve(o.expert_load, &Trace::expert_load);
    reserve(o.placements, &Trace::placements);
    reserve(o.collectives, &Trace::collectives);
    std::map<int, Layer> layers;
    for (std::size_t p = 0; p < parts_.size(); ++p) {
      auto& t = parts_[p];
      for (auto a : t.api_calls) {
        a.name = str(p, a.name);
        o.api_calls.push_back(a);
      }
      const auto shapes = static_cast<std::int32_t>(o.input_shapes.size());
      for (auto r : t.nvtx) {
        r.domain = str(p, r.domain);
        r.name = str(p, r.name);
        if (r.input_shape >= 0) r.input_shape += shapes;
        o.nvtx.push_back(r);
      }
      for (auto& s : t.input_shapes) o.input_shapes.push_back(std::move(s));
      for (auto e : t.memory_events) {
        e.buffer = buffer_id(p, e.buffer);
        o.memory_events.push_back(e);
      }
      for (auto& b : t.buffers) {
        b.id = buffer_id(p, b.id);
        o.buffers.push_back(std::move(b));
      }
      for (auto ob : t.op_buffers) o.op_buffers.push_back({op_id(p, ob.op), buffer_id(p, ob.buffer), ob.access});
      for (auto d : t.op_deps) o.op_deps.push_back({op_id(p, d.op), op_id(p, d.dep)});
      for (auto& l : t.layers) layers.try_emplace(l.layer, l);
      o.expert_load.insert(o.expert_load.end(), t.expert_load.begin(), t.expert_load.end());
      o.placements.insert(o.placements.end(), t.placements.begin(), t.placements.end());
      for (auto& c : t.collectives) o.collectives.push_back(std::move(c));
      if (o.expert_load_origin.empty()) o.expert_load_origin = t.expert_load_origin;
      o.expert_load_by_rank = o.expert_load_by_rank || t.expert_load_by_rank;
      merge_stats(t);
      t = Trace();  // freed as we go
    }
    for (auto& [n, l] : layers) o.layers.push_back(std::move(l));
    std::stable_sort(o.api_calls.begin(), o.api_calls.end(),
                     [](const ApiCall& a, const ApiCall& b) {
                       return std::tie(a.correlation_id, a.rank) < std::tie(b.correlation_id, b.rank);
                     });
    std::stable_sort(o.nvtx.begin(), o.nvtx.end(), [](const NvtxRange& a, const NvtxRange& b) {
      return std::tie(a.rank, a.thread_id, a.start_ns) < std::tie(b.rank, b.thread_id, b.start_ns);
    });
    std::stable_sort(o.memory_events.begin(), o.memory_events.end(),
                     [](const MemoryEvent& a, const MemoryEvent& b) { return std::tie(a.rank, a.ts_ns) < std::tie(b.rank, b.ts_ns); });
    std::stable_sort(o.buffers.begin(), o.buffers.end(), [](const Buffer& a, const Buffer& b) { return a.id < b.id; });
    // Every rank file may hold the run's whole load and placement tables:
    // one row per key.
    detail::dedupe_expert_load(o.expert_load);
    detail::dedupe_placements(o.placements);
    std::stable_sort(o.collectives.begin(), o.collectives.end(), [](const Collective& a, const Collective& b) {
      return std::tie(a.rank, a.correlation_id, a.start_ns) < std::tie(b.rank, b.correlation_id, b.start_ns);
    });
  }

  // Counts add up over the rank files; a flag holds where any file's does.
  template <class Stats>
  static void add_up(Stats& into, const Stats& from, std::initializer_list<std::int64_t Stats::*> counts,
                     std::initializer_list<bool Stats::*> flags) {
    for (const auto c : counts) into.*c += from.*c;
    for (const auto f : flags) into.*f = into.*f || from.*f;
  }

  void merge_stats(const Trace& t) {
    using P = ProjectionStats;
    add_up(out_.projection, t.projection,
           {&P::activities, &P::attributed_in_trace, &P::projected, &P::no_correlation, &P::no_api_call,
            &P::outside_ranges, &P::ops_retimed},
           {&P::ran});
    using R = RecognitionStats;
    auto& r = out_.recognition;
    const auto& s = t.recognition;
    add_up(r, s,
           {&R::ranges_matched, &R::annotations, &R::annotations_malformed, &R::activities_placed,
            &R::activities_total, &R::kernels_by_name, &R::layers_by_order, &R::layers_by_nesting,
            &R::directions_by_order, &R::a2a_assumed_moe, &R::backward_by_sequence, &R::load_collectives},
           {&R::ran, &R::moe, &R::iterations_marked, &R::phases_marked, &R::iterations_from_steps, &R::layers_marked});
    if (r.first_malformed.empty()) r.first_malformed = s.first_malformed;
    for (const auto& a : s.ambiguities)
      if (std::find(r.ambiguities.begin(), r.ambiguities.end(), a) == r.ambiguities.end()) r.ambiguities.push_back(a);
    for (const auto& [k, n] : s.rules_used) r.rules_used[k] += n;
  }

  struct Slot {
    std::int32_t rank, id;
    std::size_t part, index;
  };
  std::vector<Trace> parts_;
  detail::MergeIds* ids_ = nullptr;
  Trace out_;
  std::vector<std::vector<std::int32_t>> strings_;
  std::vector<std::map<std::int32_t, std::int32_t>> devices_;
  std::vector<Stream> streams_;
  std::vector<Slot> order_;
  std::vector<std::int64_t> op_base_, buffer_base_;
};

Trace merge_traces(std::vector<Trace> parts) { return TraceMerger(std::move(parts)).merge(); }

namespace detail {

Trace merge_traces(std::vector<Trace> parts, MergeIds& ids) { return TraceMerger(std::move(parts), &ids).merge(); }

void dedupe_expert_load(std::vector<ExpertLoad>& v) {
  auto key = [](const ExpertLoad& e) { return std::tie(e.iteration, e.layer, e.src_rank, e.expert); };
  std::stable_sort(v.begin(), v.end(), [&](const ExpertLoad& a, const ExpertLoad& b) { return key(a) < key(b); });
  v.erase(std::unique(v.begin(), v.end(), [&](const ExpertLoad& a, const ExpertLoad& b) { return key(a) == key(b); }),
          v.end());
}

void dedupe_placements(std::vector<ExpertPlacement>& v) {
  auto key = [](const ExpertPlacement& e) { return std::tie(e.iteration, e.layer, e.expert, e.rank, e.role); };
  std::sort(v.begin(), v.end(), [&](const ExpertPlacement& a, const ExpertPlacement& b) { return key(a) < key(b); });
  v.erase(std::unique(v.begin(), v.end(),
                      [&](const ExpertPlacement& a, const ExpertPlacement& b) { return key(a) == key(b); }),
          v.end());
}

}  // namespace detail

}  // namespace moetrace::analyzer
