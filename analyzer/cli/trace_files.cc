#include "trace_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "moetrace/instrument/trace_writer.h"

namespace moetrace::cli {

using analyzer::Trace;

struct TraceFiles::Index {
  std::vector<std::int32_t> ranks;  // sorted
  // Per rank slot: indices of the rows of tables not sorted by rank.
  std::vector<std::vector<std::uint32_t>> api, buffers, deps, op_buffers, load, placements;
  std::size_t slot(std::int32_t rank) const {
    const auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
    return it != ranks.end() && *it == rank ? static_cast<std::size_t>(it - ranks.begin()) : 0;
  }
};

std::string rank_file_path(const std::string& path, int rank) {
  const std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.rank{}{}", p.stem().string(), rank, p.extension().string())).string();
}

TraceFiles::TraceFiles(const Trace& trace) : trace_(trace), index_(std::make_unique<Index>()) {
  auto& x = *index_;
  for (RankId r : trace.rank_ids()) x.ranks.push_back(r.value);
  if (x.ranks.empty()) x.ranks.push_back(0);
  const std::size_t n = x.ranks.size();
  for (auto* v : {&x.api, &x.buffers, &x.deps, &x.op_buffers, &x.load, &x.placements}) v->resize(n);
  auto u = [](std::size_t i) { return static_cast<std::uint32_t>(i); };
  for (std::size_t i = 0; i < trace.api_calls.size(); ++i) x.api[x.slot(trace.api_calls[i].rank.value)].push_back(u(i));
  for (std::size_t i = 0; i < trace.buffers.size(); ++i) x.buffers[x.slot(trace.buffers[i].rank.value)].push_back(u(i));
  auto op_rank = [&](OpId id) {
    const int i = trace.op_index(id);
    return i >= 0 ? trace.ops[static_cast<std::size_t>(i)].rank.value : x.ranks.front();
  };
  for (std::size_t i = 0; i < trace.op_deps.size(); ++i) x.deps[x.slot(op_rank(trace.op_deps[i].op))].push_back(u(i));
  for (std::size_t i = 0; i < trace.op_buffers.size(); ++i)
    x.op_buffers[x.slot(op_rank(trace.op_buffers[i].op))].push_back(u(i));
  // Load from a source rank goes with that rank; per-expert totals
  // (src_rank -1) with the expert's home rank floor(e P / E).
  std::int32_t experts = 1;
  for (const auto& l : trace.expert_load) experts = std::max(experts, l.expert + 1);
  const auto world = static_cast<std::int64_t>(std::max<std::size_t>(n, static_cast<std::size_t>(std::max(1, trace.run.world_size))));
  for (std::size_t i = 0; i < trace.expert_load.size(); ++i) {
    const auto& l = trace.expert_load[i];
    const auto home = static_cast<std::int32_t>(static_cast<std::int64_t>(l.expert) * world / experts);
    x.load[x.slot(l.src_rank >= 0 ? l.src_rank : home)].push_back(u(i));
  }
  for (std::size_t i = 0; i < trace.placements.size(); ++i)
    x.placements[x.slot(trace.placements[i].rank)].push_back(u(i));
}

TraceFiles::~TraceFiles() = default;

namespace {

std::string splits_text(const std::vector<std::int64_t>& v) {
  if (v.empty()) return "";
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : ", ") + std::to_string(v[i]);
  return s + "]";
}

template <class Vec, class Rank>
auto rank_range(const Vec& v, std::int32_t rank, Rank rank_of) {
  auto lo = std::partition_point(v.begin(), v.end(), [&](const auto& e) { return rank_of(e) < rank; });
  auto hi = std::partition_point(lo, v.end(), [&](const auto& e) { return rank_of(e) <= rank; });
  return std::pair{lo, hi};
}

}  // namespace

void TraceFiles::write(const std::string& path, const std::vector<std::int32_t>& wanted, const ConfigEntries& extra) const {
  const Trace& t = trace_;
  const Index& x = *index_;
  const std::vector<std::int32_t>& ranks = wanted.empty() ? x.ranks : wanted;
  const std::set<std::int32_t> keep(ranks.begin(), ranks.end());
  instrument::RunRecord run;
  run.name = t.run.name;
  run.backend = t.run.backend;
  run.variant = t.run.variant;
  run.simulated = t.run.simulated;
  run.world_size = t.run.world_size;
  run.host = t.run.host;
  run.config_json = t.run.config_json;
  instrument::TraceWriter w(path, run);
  for (const auto& [k, v] : t.run.config) w.set_config(k, v);
  for (const auto& [k, v] : extra) w.set_config(k, v);
  if (wanted.empty()) w.add_dropped_records(t.run.dropped_records);
  std::vector<std::int32_t> strings(t.strings.size(), -1);
  auto str = [&](StringId id) {
    if (!id.valid() || static_cast<std::size_t>(id.value) >= strings.size()) return StringId();
    auto& s = strings[static_cast<std::size_t>(id.value)];
    if (s < 0) s = w.intern(t.strings[static_cast<std::size_t>(id.value)]).value;
    return StringId(s);
  };
  std::set<std::int32_t> devices;
  for (const auto& r : t.ranks)
    if (keep.count(r.rank.value) != 0) devices.insert(r.device.value);
  for (const auto& s : t.streams)
    if (keep.count(s.rank.value) != 0) devices.insert(s.device.value);
  for (const auto& d : t.devices)
    if (devices.count(d.id.value) != 0)
      w.add(instrument::DeviceRecord{d.id, d.name, d.uuid, d.compute_major, d.compute_minor, d.sm_count,
                                     d.memory_bytes, d.simulated});
  for (const auto& r : t.ranks)
    if (keep.count(r.rank.value) != 0) w.add(instrument::RankRecord{r.rank, r.device, r.local_rank, r.host, r.pid});
  for (const auto& l : t.layers)
    w.add(instrument::LayerRecord{l.layer, l.kind, l.num_experts, l.top_k, l.model_dim, l.hidden_dim, l.tokens});
  for (std::size_t si = 0; si < t.streams.size(); ++si) {
    const auto& s = t.streams[si];
    if (keep.count(s.rank.value) == 0) continue;
    w.add(instrument::StreamRecord{
        .id = s.id, .rank = s.rank, .device = s.device, .native_id = s.native_id, .role = s.role, .name = s.name});
    for (const auto& op : t.track_ops(si)) {
      w.add(instrument::OpRangeRecord{
          .id = op.id, .rank = op.rank, .stream = s.id, .kind = op.kind, .name = str(op.name), .layer = op.layer,
          .iteration = op.iteration, .micro_batch = op.micro_batch, .chunk = op.chunk, .phase = op.phase,
          .start_ns = op.start_ns, .end_ns = op.end_ns, .launch_start_ns = op.launch_start_ns,
          .launch_end_ns = op.launch_end_ns, .flops = op.flops, .bytes = op.bytes, .recv_bytes = op.recv_bytes, .peer = op.peer,
          .nvtx_id = op.nvtx_id});
    }
    for (const auto& a : t.track_activities(si)) {
      const OpId op = a.op >= 0 ? t.ops[static_cast<std::size_t>(a.op)].id : OpId();
      if (a.type == analyzer::ActivityType::kKernel) {
        instrument::KernelRecord k{.rank = a.rank, .stream = s.id, .start_ns = a.start_ns, .end_ns = a.end_ns,
                                   .name = str(a.name), .correlation_id = a.correlation_id};
        if (const auto* lc = t.launch_config(a)) {
          std::copy(std::begin(lc->grid), std::end(lc->grid), k.grid.begin());
          std::copy(std::begin(lc->block), std::end(lc->block), k.block.begin());
          k.shared_bytes = lc->shared_bytes;
          k.registers = lc->registers;
        }
        k.op = op;
        w.add(k);
      } else if (a.type == analyzer::ActivityType::kMemcpy) {
        w.add(instrument::MemcpyRecord{.rank = a.rank, .stream = s.id, .start_ns = a.start_ns, .end_ns = a.end_ns,
                                       .bytes = a.bytes, .copy_kind = static_cast<schema::CopyKind>(a.copy_kind),
                                       .src_kind = static_cast<schema::MemoryKind>(a.src_kind),
                                       .dst_kind = static_cast<schema::MemoryKind>(a.dst_kind),
                                       .correlation_id = a.correlation_id, .op = op});
      } else {
        w.add(instrument::MemsetRecord{.rank = a.rank, .stream = s.id, .start_ns = a.start_ns, .end_ns = a.end_ns,
                                       .bytes = a.bytes, .value = std::nullopt, .correlation_id = a.correlation_id,
                                       .op = op});
      }
    }
  }
  for (std::int32_t rank : ranks) {
    const std::size_t slot = x.slot(rank);
    if (x.ranks[slot] != rank) continue;
    for (auto i : x.api[slot]) {
      const auto& a = t.api_calls[i];
      w.add(instrument::ApiCallRecord{a.rank, a.thread_id, a.start_ns, a.end_ns, a.api, str(a.name), a.correlation_id,
                                      a.return_code});
    }
    for (auto [it, end] = rank_range(t.nvtx, rank, [](const auto& e) { return e.rank.value; }); it != end; ++it) {
      instrument::NvtxRangeRecord r{.rank = it->rank, .thread_id = it->thread_id, .start_ns = it->start_ns,
                                    .end_ns = it->end_ns, .domain = str(it->domain), .name = str(it->name)};
      if (it->has_payload_int) r.payload_int = it->payload_int;
      if (it->autograd_seq >= 0) {
        r.autograd_seq = it->autograd_seq;
        r.autograd_backward = it->autograd_backward;
      }
      w.add(r);
    }
    for (auto [it, end] = rank_range(t.memory_events, rank, [](const auto& e) { return e.rank.value; }); it != end; ++it) {
      w.add(instrument::MemoryEventRecord{.rank = it->rank, .ts_ns = it->ts_ns, .alloc = it->alloc,
                                          .address = it->address, .bytes = it->bytes,
                                          .memory_kind = it->memory_kind, .buffer = it->buffer});
    }
    for (auto [it, end] = rank_range(t.collectives, rank, [](const auto& e) { return e.rank.value; }); it != end; ++it) {
      w.add(instrument::CollectiveRecord{.rank = it->rank, .start_ns = it->start_ns, .end_ns = it->end_ns,
                                         .correlation_id = it->correlation_id, .name = it->name,
                                         .in_nelems = it->in_nelems, .out_nelems = it->out_nelems,
                                         .dtype = it->dtype, .group_size = it->group_size,
                                         .group_ranks = it->group_ranks, .process_group = it->process_group,
                                         .in_splits = splits_text(it->in_splits),
                                         .out_splits = splits_text(it->out_splits), .seq = it->seq});
    }
    for (auto i : x.buffers[slot]) {
      const auto& b = t.buffers[i];
      w.add(instrument::BufferRecord{.id = b.id, .rank = b.rank, .tag = b.tag, .bytes = b.bytes,
                                     .memory_kind = b.memory_kind, .layer = b.layer, .chunk = b.chunk,
                                     .alloc_ns = b.alloc_ns, .free_ns = b.free_ns});
    }
    for (auto i : x.deps[slot]) w.add(instrument::OpDepRecord{t.op_deps[i].op, t.op_deps[i].dep});
    for (auto i : x.op_buffers[slot])
      w.add(instrument::OpBufferRecord{t.op_buffers[i].op, t.op_buffers[i].buffer, t.op_buffers[i].access});
    for (auto i : x.load[slot]) {
      const auto& l = t.expert_load[i];
      w.add(instrument::ExpertLoadRecord{l.iteration, l.layer, l.src_rank, l.expert, l.tokens});
    }
    for (auto i : x.placements[slot]) {
      const auto& p = t.placements[i];
      w.add(instrument::ExpertPlacementRecord{p.iteration, p.layer, p.expert, p.rank, p.role});
    }
  }
  w.close();
}

}  // namespace moetrace::cli
