// What reaches the database while tracing: the flusher thread and each
// batch's rows (links joined to their ops, then one multi-row INSERT per
// table). Opening and closing the database: trace_writer.cc.
#include "moetrace/instrument/trace_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/schema.h"
#include "pending_rows.h"
#include "row_inserter.h"
namespace moetrace::instrument {

void TraceWriter::flusher_loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.flush_interval, [this] { return stop_ || wake_; });
    if (stop_) break;
    wake_ = false;
    lock.unlock();
    std::exception_ptr error;
    try {
      write_pending();
    } catch (const std::exception& e) {
      // Said now (a traced job may run for hours), and thrown by the next
      // flush()/close(): its rows are lost.
      std::fprintf(stderr, "moetrace: background flush failed: %s\n", e.what());
      error = std::current_exception();
    }
    lock.lock();
    if (error && !background_error_) background_error_ = std::move(error);
  }
}

void TraceWriter::flush() {
  std::exception_ptr error;
  {
    std::lock_guard lock(mu_);
    std::swap(error, background_error_);
  }
  if (error) std::rethrow_exception(error);
  write_pending();
}

void TraceWriter::write_pending() {
  std::lock_guard flush_lock(flush_mu_);
  auto batch = std::move(spare_);
  std::int64_t dropped = 0, min_ts = 0, max_ts = 0;
  int world_size = 0;
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      spare_ = std::move(batch);
      return;
    }
    std::swap(batch, pending_);
    dropped = dropped_;
    min_ts = min_ts_;
    max_ts = max_ts_;
    world_size = world_size_;
  }
  room_.notify_all();
  db_.exec("BEGIN");
  try {
    write_batch(*batch);
    auto st = db_.prepare(
        "UPDATE run SET dropped_records = ?1, start_ns = ?2, end_ns = ?3, "
        "world_size = coalesce(?4, world_size)");
    st.bind(1, dropped);
    if (min_ts <= max_ts) {
      st.bind(2, min_ts);
      st.bind(3, max_ts);
    } else {
      st.bind_null(2);
      st.bind_null(3);
    }
    st.bind_id(4, world_size > 0 ? world_size : -1);
    st.run();
    db_.exec("COMMIT");
  } catch (...) {
    try { db_.exec("ROLLBACK"); } catch (...) {}
    batch->clear();
    spare_ = std::move(batch);
    throw;
  }
  rows_written_ += static_cast<std::int64_t>(batch->rows);
  ++flushes_;
  batch->clear();
  spare_ = std::move(batch);
}

// Joins links added on their own to their op's row: to an op of this batch
// before it is inserted, else to a row an earlier flush wrote (read, merged,
// updated), else they wait for a later flush (orphans_).
void TraceWriter::join_links(Pending& b) {
  if (b.links.empty() && orphans_.empty()) return;
  std::vector<Link> links = std::move(orphans_);
  orphans_.clear();
  links.insert(links.end(), b.links.begin(), b.links.end());
  std::sort(links.begin(), links.end());
  const auto by_op = [](const Link& l, OpId op) { return l.op < op; };

  std::vector<std::int64_t> deps;
  std::vector<schema::BufferLink> buffers;
  // Merges links [lo, hi) into the encoded arrays `dj` and `bj`.
  const auto merge = [&](std::size_t lo, std::size_t hi, std::string& dj, std::string& bj) {
    deps.clear();
    buffers.clear();
    if (!dj.empty() && !schema::parse_deps(dj, deps)) throw Error(path_ + ": op_ranges.deps is damaged: " + dj);
    if (!bj.empty() && !schema::parse_buffers(bj, buffers))
      throw Error(path_ + ": op_ranges.buffers is damaged: " + bj);
    for (std::size_t k = lo; k < hi; ++k) {
      if (links[k].access == 0) deps.push_back(links[k].other);
      else buffers.push_back({links[k].other, links[k].access});
    }
    dj = schema::encode_deps(deps);
    bj = schema::encode_buffers(buffers);
  };

  std::vector<char> joined(links.size(), 0);
  for (auto& op : b.ops) {
    const auto lo = std::lower_bound(links.begin(), links.end(), op.r.id, by_op);
    auto hi = lo;
    while (hi != links.end() && hi->op == op.r.id) ++hi;
    if (lo == hi) continue;
    const auto first = static_cast<std::size_t>(lo - links.begin()), last = static_cast<std::size_t>(hi - links.begin());
    merge(first, last, op.deps, op.buffers);
    std::fill(joined.begin() + static_cast<std::ptrdiff_t>(first), joined.begin() + static_cast<std::ptrdiff_t>(last), 1);
  }

  std::optional<sqlite::Statement> read, update;
  for (std::size_t first = 0; first < links.size();) {
    std::size_t last = first;
    while (last < links.size() && links[last].op == links[first].op) ++last;
    if (!joined[first]) {
      if (!read) {
        read.emplace(db_, "SELECT deps, buffers FROM op_ranges WHERE id = ?1");
        update.emplace(db_, "UPDATE op_ranges SET deps = ?2, buffers = ?3 WHERE id = ?1");
      }
      read->bind(1, links[first].op.value);
      if (read->step()) {
        std::string dj(read->text(0)), bj(read->text(1));
        read->reset();
        op_links_digest_.remove(op_link_hash(links[first].op.value, dj, bj));
        merge(first, last, dj, bj);
        op_links_digest_.add(op_link_hash(links[first].op.value, dj, bj));
        update->bind(1, links[first].op.value);
        bind_text_or_null(*update, 2, dj);
        bind_text_or_null(*update, 3, bj);
        update->run();
      } else {
        read->reset();
        orphans_.insert(orphans_.end(), links.begin() + static_cast<std::ptrdiff_t>(first),
                        links.begin() + static_cast<std::ptrdiff_t>(last));
      }
    }
    first = last;
  }
}

void TraceWriter::write_batch(Pending& b) {
  // Each table's row binder binds and hashes its values in column order
  // (row_inserter.h); the columns are the Inserter's (trace_writer.cc).
  using Row = RowBinder;
  auto& s = *stmts_;
  s.string.insert(b.strings, [](Row& st, const auto& r) { st.row(r.first.value, StaticText{r.second}); });
  s.config.insert(b.config, [](Row& st, const auto& r) { st.row(r.first, r.second); });
  s.launch.insert(b.launches, [](Row& st, const auto& r) {
    const auto& g = r.second.grid;
    const auto& k = r.second.block;
    st.row(r.first, g[0], g[1], g[2], k[0], k[1], k[2], known(r.second.shared_bytes), known(r.second.registers));
  });
  s.device.insert(b.devices, [](Row& st, const DeviceRecord& r) {
    st.row(r.id.value, r.name, TextOrNull{r.uuid}, known(r.compute_major), known(r.compute_minor),
           known(r.sm_count), known(r.memory_bytes), r.simulated);
  });
  s.rank.insert(b.ranks, [](Row& st, const RankRecord& r) {
    st.row(r.rank.value, r.device.value, known(r.local_rank), TextOrNull{r.host}, known(r.pid));
  });
  s.stream.insert(b.streams, [](Row& st, const StreamRecord& r) {
    st.row(r.id.value, r.rank.value, known(r.device.value), known(r.native_id), r.role, TextOrNull{r.name},
           r.priority);
  });
  s.layer.insert(b.layers, [](Row& st, const LayerRecord& r) {
    st.row(r.layer, r.kind, known(r.num_experts), known(r.top_k), known(r.model_dim), known(r.hidden_dim),
           known(r.tokens));
  });
  s.kernel.insert(b.kernels, [](Row& st, const PendingKernel& r) {
    st.row(r.k.rank.value, r.k.stream.value, r.k.start_ns, r.k.end_ns, r.k.name.value, positive(r.k.correlation_id),
           known(r.launch_id), known(r.k.op.value));
  });
  s.memcpy.insert(b.memcpys, [](Row& st, const MemcpyRecord& r) {
    st.row(r.rank.value, r.stream.value, r.start_ns, r.end_ns, r.bytes, r.copy_kind, r.src_kind, r.dst_kind,
           positive(r.correlation_id), known(r.op.value));
  });
  s.memset.insert(b.memsets, [](Row& st, const MemsetRecord& r) {
    st.row(r.rank.value, r.stream.value, r.start_ns, r.end_ns, r.bytes, r.value, positive(r.correlation_id),
           known(r.op.value));
  });
  s.memory_event.insert(b.memory_events, [this](Row& st, const MemoryEventRecord& r) {
    // memory_events has no rowid to number it: the writer numbers it (id).
    st.row(r.rank.value, r.ts_ns, r.alloc, r.address, r.bytes, r.memory_kind, known(r.stream.value),
           positive(r.correlation_id), known(r.buffer.value), next_memory_event_id_++);
  });
  s.api_call.insert(b.api_calls, [](Row& st, const ApiCallRecord& r) {
    st.row(r.rank.value, r.thread_id, r.start_ns, r.end_ns, r.api, r.name.value, r.correlation_id, r.return_code);
  });
  s.sync.insert(b.syncs, [](Row& st, const SyncRecord& r) {
    st.row(r.rank.value, known(r.stream.value), r.start_ns, r.end_ns, r.kind, positive(r.correlation_id),
           known(r.wait_stream.value), positive(r.event_record_correlation_id));
  });
  s.overhead.insert(b.overheads, [](Row& st, const OverheadRecord& r) {
    st.row(r.rank.value, known(r.thread_id), r.start_ns, r.end_ns, r.kind);
  });
  struct AutogradRow {
    std::int64_t nvtx_id, sequence;
    bool backward;
  };
  std::vector<AutogradRow> autograd;
  struct ShapeRow {
    std::int64_t nvtx_id;
    const NvtxRangeRecord* r;
  };
  std::vector<ShapeRow> shapes;
  s.nvtx.insert(b.nvtx, [this, &autograd, &shapes](Row& st, const NvtxRangeRecord& r) {
    if (r.autograd_seq) autograd.push_back({next_nvtx_id_, *r.autograd_seq, r.autograd_backward});
    if (!r.input_dims.empty()) shapes.push_back({next_nvtx_id_, &r});
    st.hash_only(11, next_nvtx_id_++);  // the rowid SQLite gives the row: the loader reads it
    st.row(r.rank.value, r.thread_id, r.start_ns, known(r.end_ns), known(r.domain.value), r.name.value,
           known(r.category), known(r.color), r.payload_int, r.payload_double);
  });
  s.autograd.insert(autograd, [](Row& st, const AutogradRow& r) { st.row(r.nvtx_id, r.sequence, r.backward); });
  s.input_shapes.insert(shapes, [](Row& st, const ShapeRow& r) {
    st.row(r.nvtx_id, r.r->input_dims, TextOrNull{r.r->input_types});
  });
  // Sequence numbers in a table of their own (collective_seq), keyed by the
  // rowid SQLite gives the collectives row, so that readers that predate it
  // read collectives as before.
  std::vector<std::pair<std::int64_t, std::int64_t>> seqs;  // (collectives rowid, seq)
  s.collective.insert(b.collectives, [&](Row& st, const CollectiveRecord& r) {
    if (r.seq >= 0) seqs.emplace_back(next_collective_id_, r.seq);
    ++next_collective_id_;
    st.row(r.rank.value, known(r.stream.value), r.start_ns, r.end_ns, positive(r.correlation_id), r.name,
           known(r.in_nelems), known(r.out_nelems), TextOrNull{r.dtype}, known(r.group_size),
           TextOrNull{r.group_ranks}, TextOrNull{r.process_group}, TextOrNull{r.in_splits},
           TextOrNull{r.out_splits});
  });
  const auto pair_row = [](Row& st, const std::pair<std::int64_t, std::int64_t>& r) { st.row(r.first, r.second); };
  s.collective_seq.insert(seqs, pair_row);
  join_links(b);
  if (options_.integrity_record)
    for (const auto& op : b.ops) op_links_digest_.add(op_link_hash(op.r.id.value, op.deps, op.buffers));
  s.op.insert(b.ops, [](Row& st, const PendingOp& p) {
    const OpRangeRecord& r = p.r;
    st.row(r.id.value, r.rank.value, r.stream.value, r.kind, known(r.name.value), known(r.layer), known(r.iteration),
           known(r.micro_batch), known(r.chunk), r.phase, r.start_ns, r.end_ns, known(r.launch_start_ns),
           known(r.launch_end_ns), known(r.flops), known(r.bytes), known(r.peer.value), known(r.nvtx_id),
           TextOrNull{p.deps}, TextOrNull{p.buffers});
  });
  // Received bytes in a table of their own (op_recv_bytes), so that readers
  // that predate it read op_ranges as before.
  std::vector<std::pair<std::int64_t, std::int64_t>> received;  // (op id, bytes)
  for (const auto& p : b.ops)
    if (p.r.recv_bytes >= 0) received.emplace_back(p.r.id.value, p.r.recv_bytes);
  s.op_recv_bytes.insert(received, pair_row);
  s.buffer.insert(b.buffers, [](Row& st, const BufferRecord& r) {
    st.row(r.id.value, r.rank.value, StaticText{r.tag}, r.bytes, r.memory_kind, known(r.layer), known(r.chunk),
           known(r.alloc_ns), known(r.free_ns), nonzero(r.address));
  });
  s.expert_load.insert(b.expert_load, [](Row& st, const ExpertLoadRecord& r) {
    st.row(r.iteration, r.layer, r.src_rank, r.expert, r.tokens);
  });
  s.placement.insert(b.placements, [](Row& st, const ExpertPlacementRecord& r) {
    st.row(r.iteration, r.layer, r.expert, r.rank, r.role);
  });
}

}  // namespace moetrace::instrument
