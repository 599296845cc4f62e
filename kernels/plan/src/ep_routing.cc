// Where each chunk's rows go, and the all-to-all ops that move them.
//
// A full plan lays every source's rows out by serving rank (RoutedLayout) and
// gives each all-to-all its per-peer segments, so the executors can move real
// rows: O(P^2 E) per layer. A timing-only plan (PlanDetail::timing_only)
// keeps per-rank totals, O(P E) per layer, and gives each all-to-all two
// aggregated transfers per direction: its segment to itself and the rest,
// with an invalid peer. Both give the simulator the same times.
#include <algorithm>
#include <numeric>

#include "ep_builder.h"

namespace moetrace::plan::detail {

std::vector<RankId> EpBuilder::world_group() const {
  std::vector<RankId> group;
  if (timing_only()) return group;
  group.reserve(at(P_));
  for (int r = 0; r < P_; ++r) group.push_back(RankId(r));
  return group;
}

Segment EpBuilder::send_segment(const RankState& s, int q, int c) const {
  Segment seg;
  bool found = false;
  for (std::size_t i = 0; i < s.layout.experts.size(); ++i) {
    if (s.serve[at(s.layout.experts[i])] != q) continue;
    if (!found) {
      seg.row = s.layout.offset(c, i);
      found = true;
    }
    seg.rows += s.layout.rows_in_chunk(c, i);
  }
  if (!found) seg.row = s.layout.chunk_offset(c);
  return seg;
}

void EpBuilder::prepare(int j, int l) {
  LayerState& L = layer(l);
  L = LayerState{};
  L.rank.resize(at(P_));
  L.chunk.assign(at(spec_.chunks), std::vector<ChunkRank>(at(P_)));
  if (timing_only())
    prepare_totals(j, l);
  else
    prepare_layouts(j, l);
  if (padded())
    for (int p = 0; p < P_; ++p)
      for (int e = 0; e < E_; ++e) L.capacity = std::max(L.capacity, load_.count(j, l, p, e));
  if (spec_.balance != Balance::kNone) {  // only replicated experts have these
    L.replica_params.assign(at(E_), std::vector<BufferId>(at(P_)));
    L.replica_grads = L.replica_params;
  }
  L.fwd_slots.assign(at(P_), {});
  L.bwd_slots.assign(at(P_), {});
}

void EpBuilder::prepare_layouts(int j, int l) {
  LayerState& L = layer(l);
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    s.serve.resize(at(E_));
    for (int e = 0; e < E_; ++e) s.serve[at(e)] = holds(j, l, p, e) ? p : home(e);
    // Experts grouped by serving rank so each peer's rows are contiguous.
    std::vector<int> order(at(E_));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s.serve[at(a)] < s.serve[at(b)]; });
    s.layout.tokens = load_.tokens_of(j, p);
    s.layout.top_k = m_.top_k;
    s.layout.num_chunks = spec_.chunks;
    s.layout.experts = order;
    for (int e : order) s.layout.expert_rows.push_back(load_.count(j, l, p, e));
    s.tokens = s.layout.tokens;
    s.rows = s.layout.total_rows();
  }
  for (int c = 0; c < spec_.chunks; ++c)
    for (int q = 0; q < P_; ++q) {
      ChunkRank& cr = L.chunk[at(c)][at(q)];
      for (int p = 0; p < P_; ++p) {
        Segment seg = send_segment(L.rank[at(p)], q, c);
        cr.recv.push_back({cr.rows, seg.rows});
        cr.rows += seg.rows;
      }
      for (int e = 0; e < E_; ++e) {
        bool served = false;
        std::vector<RowSpan> spans;
        std::int64_t rows = 0;
        for (int p = 0; p < P_; ++p) {
          const RankState& s = L.rank[at(p)];
          if (s.serve[at(e)] != q) continue;
          served = true;
          // e's rows inside p's segment for q.
          std::int64_t within = 0;
          for (std::size_t i = 0; i < s.layout.experts.size(); ++i) {
            const int x = s.layout.experts[i];
            if (s.serve[at(x)] != q) continue;
            if (x == e) {
              const std::int64_t n = s.layout.rows_in_chunk(c, i);
              if (n > 0) spans.push_back({cr.recv[at(p)].row + within, n});
              rows += n;
              break;
            }
            within += s.layout.rows_in_chunk(c, i);
          }
        }
        if (served || home(e) == q) {
          cr.experts.push_back(e);
          cr.spans.push_back(std::move(spans));
          cr.expert_rows.push_back(rows);
        }
      }
    }
}

// Per-rank totals of pipemoe Eq. 5's chunking: chunk c holds rows
// [floor(n c / r), floor(n (c+1) / r)) of each (source, expert) pair; every
// expert is served on its home rank.
void EpBuilder::prepare_totals(int j, int l) {
  LayerState& L = layer(l);
  const auto n = at(spec_.chunks);
  const auto local = at(local_);
  for (auto& chunk : L.chunk)
    for (int q = 0; q < P_; ++q) {
      ChunkRank& cr = chunk[at(q)];
      cr.experts.resize(local);
      std::iota(cr.experts.begin(), cr.experts.end(), q * local_);
      cr.spans.resize(local);
      cr.expert_rows.assign(local, 0);
    }
  // This loop visits every (source, expert, chunk): 134 M times at 1024 ranks
  // with r = 4. It accumulates into flat arrays indexed [x * n + c] (a few
  // tens of KB, cache resident), takes chunk sizes from a table rather than
  // two divisions each, and fills the ChunkRank structs once at the end.
  const std::int64_t table_rows = static_cast<std::int64_t>(split_.size() / n);
  const auto rows_of_chunk = [&](std::int64_t cnt, std::size_t c) {
    if (cnt < table_rows) return split_[static_cast<std::size_t>(cnt) * n + c];
    return chunk_rows(cnt, static_cast<int>(c), spec_.chunks);
  };
  std::vector<std::int64_t> expert_rows(at(E_) * n, 0), recv_remote(at(P_) * n, 0);
  std::vector<std::int64_t> send_local(n), send_remote(n);
  for (int p = 0; p < P_; ++p) {
    RankState& s = L.rank[at(p)];
    s.tokens = load_.tokens_of(j, p);
    const std::int64_t* counts = load_.source_counts(j, l, p);
    std::fill(send_local.begin(), send_local.end(), 0);
    std::fill(send_remote.begin(), send_remote.end(), 0);
    for (int e = 0; e < E_; ++e) {
      const std::int64_t cnt = counts[e];
      if (cnt == 0) continue;
      s.rows += cnt;
      const int q = e / local_;
      std::int64_t* to_expert = &expert_rows[at(e) * n];
      if (q == p) {
        for (std::size_t c = 0; c < n; ++c) {
          const std::int64_t rows = rows_of_chunk(cnt, c);
          to_expert[c] += rows;
          send_local[c] += rows;
        }
      } else {
        std::int64_t* to_rank = &recv_remote[at(q) * n];
        for (std::size_t c = 0; c < n; ++c) {
          const std::int64_t rows = rows_of_chunk(cnt, c);
          to_expert[c] += rows;
          to_rank[c] += rows;
          send_remote[c] += rows;
        }
      }
    }
    for (std::size_t c = 0; c < n; ++c) {
      ChunkRank& from = L.chunk[c][at(p)];
      from.send_local = send_local[c];
      from.send_remote = send_remote[c];
    }
  }
  for (std::size_t c = 0; c < n; ++c)
    for (int q = 0; q < P_; ++q) {
      ChunkRank& to = L.chunk[c][at(q)];
      to.recv_remote = recv_remote[at(q) * n + c];
      for (std::size_t i = 0; i < local; ++i) {
        const std::int64_t rows = expert_rows[(at(q) * local + i) * n + c];
        to.expert_rows[i] = rows;
        to.rows += rows;
      }
    }
}

void EpBuilder::all_to_all(OpKind kind, const Coords& co, int c, bool to_experts, BufferId RankState::*rank_buf,
                           BufferId ChunkRank::*chunk_buf, bool free_rank_buf, bool free_chunk_buf) {
  const LayerState& L = layer(co.layer);
  const CollectiveId id = b_.next_collective();
  const std::vector<RankId> group = world_group();
  const std::int64_t row_bytes = m_.model_dim * m_.elem_bytes;
  const OpArgs each = op_at(kind, co, op_kind_name(kind), RankId(), StreamId());  // the name, formatted once
  const bool last_chunk = c == spec_.chunks - 1;
  for (int r = 0; r < P_; ++r) {
    const RankState& s = L.rank[at(r)];
    const ChunkRank& cr = L.chunk[at(c)][at(r)];
    const BufferId src = to_experts ? s.*rank_buf : cr.*chunk_buf;
    const BufferId dst = to_experts ? cr.*chunk_buf : s.*rank_buf;
    Collective col;
    col.id = id;
    col.kind = CollectiveKind::kAllToAllV;
    col.group = group;
    col.exchange_peers = spec_.exchange_peers;
    OpArgs a = each;
    a.rank = RankId(r);
    a.stream = streams(r).comm;
    if (timing_only()) {
      // As a source this rank sends send_remote rows and gets them back; as
      // an expert host it receives recv_remote rows and returns them.
      const std::int64_t out_remote = to_experts ? cr.send_remote : cr.recv_remote;
      const std::int64_t in_remote = to_experts ? cr.recv_remote : cr.send_remote;
      col.sends = {{RankId(r), View{src, 0, cr.send_local}, cr.send_local * row_bytes},
                   {RankId(), View{src, 0, out_remote}, out_remote * row_bytes}};
      col.recvs = {{RankId(r), View{dst, 0, cr.send_local}, cr.send_local * row_bytes},
                   {RankId(), View{dst, 0, in_remote}, in_remote * row_bytes}};
      a.bytes = out_remote * row_bytes;
    } else {
      for (int peer = 0; peer < P_; ++peer) {
        const Segment as_source = send_segment(s, peer, c);
        const Segment as_expert = cr.recv[at(peer)];
        const Segment from = to_experts ? as_source : as_expert;
        const Segment to = to_experts ? as_expert : as_source;
        // Capacity padding: the wire carries C rows per expert of the segment,
        // whatever the rows routed (the views stay the routed rows).
        const std::int64_t padded_bytes = local_ * L.capacity * row_bytes;
        const std::int64_t send_bytes = padded() ? padded_bytes : from.rows * row_bytes;
        const std::int64_t recv_bytes = padded() ? padded_bytes : to.rows * row_bytes;
        col.sends.push_back({RankId(peer), View{src, from.row, from.rows}, send_bytes});
        col.recvs.push_back({RankId(peer), View{dst, to.row, to.rows}, recv_bytes});
        if (peer != r) a.bytes += send_bytes;
      }
    }
    a.data = std::move(col);
    if (free_rank_buf && last_chunk) a.free = {s.*rank_buf};
    if (free_chunk_buf) a.free = {cr.*chunk_buf};
    b_.add(std::move(a));
  }
}

}  // namespace moetrace::plan::detail
