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
  using Statement = RowBinder;  // binds and hashes (row_inserter.h)
  auto& s = *stmts_;
  auto corr = [](Statement& st, int i, std::int64_t c) {
    if (c > 0) st.bind(i, c); else st.bind_null(i);
  };
  s.string.insert(b.strings, [](Statement& st, int o, const auto& r) {
    st.bind(o + 1, std::int64_t{r.first.value});
    st.bind_static(o + 2, r.second);
  });
  s.config.insert(b.config, [](Statement& st, int o, const auto& r) {
    st.bind(o + 1, r.first);
    st.bind(o + 2, r.second);
  });
  s.launch.insert(b.launches, [](Statement& st, int o, const auto& r) {
    st.bind(o + 1, std::int64_t{r.first});
    for (int i = 0; i < 3; ++i) st.bind(o + 2 + i, std::int64_t{r.second.grid[static_cast<std::size_t>(i)]});
    for (int i = 0; i < 3; ++i) st.bind(o + 5 + i, std::int64_t{r.second.block[static_cast<std::size_t>(i)]});
    st.bind_id(o + 8, r.second.shared_bytes);
    st.bind_id(o + 9, r.second.registers);
  });
  s.device.insert(b.devices, [](Statement& st, int o, const DeviceRecord& r) {
    st.bind(o + 1, std::int64_t{r.id.value});
    st.bind(o + 2, r.name);
    bind_text_or_null(st, o + 3, r.uuid);
    st.bind_id(o + 4, r.compute_major);
    st.bind_id(o + 5, r.compute_minor);
    st.bind_id(o + 6, r.sm_count);
    st.bind_id(o + 7, r.memory_bytes);
    st.bind(o + 8, std::int64_t{r.simulated ? 1 : 0});
  });
  s.rank.insert(b.ranks, [](Statement& st, int o, const RankRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind(o + 2, std::int64_t{r.device.value});
    st.bind_id(o + 3, r.local_rank);
    bind_text_or_null(st, o + 4, r.host);
    st.bind_id(o + 5, r.pid);
  });
  s.stream.insert(b.streams, [](Statement& st, int o, const StreamRecord& r) {
    st.bind(o + 1, std::int64_t{r.id.value});
    st.bind(o + 2, std::int64_t{r.rank.value});
    st.bind_id(o + 3, r.device.value);
    st.bind_id(o + 4, r.native_id);
    st.bind(o + 5, r.role);
    bind_text_or_null(st, o + 6, r.name);
    st.bind(o + 7, std::int64_t{r.priority});
  });
  s.layer.insert(b.layers, [](Statement& st, int o, const LayerRecord& r) {
    st.bind(o + 1, std::int64_t{r.layer});
    st.bind(o + 2, r.kind);
    st.bind_id(o + 3, r.num_experts);
    st.bind_id(o + 4, r.top_k);
    st.bind_id(o + 5, r.model_dim);
    st.bind_id(o + 6, r.hidden_dim);
    st.bind_id(o + 7, r.tokens);
  });
  s.kernel.insert(b.kernels, [&](Statement& st, int o, const PendingKernel& r) {
    st.bind(o + 1, std::int64_t{r.k.rank.value});
    st.bind(o + 2, std::int64_t{r.k.stream.value});
    st.bind(o + 3, r.k.start_ns);
    st.bind(o + 4, r.k.end_ns);
    st.bind(o + 5, std::int64_t{r.k.name.value});
    corr(st, o + 6, r.k.correlation_id);
    st.bind_id(o + 7, r.launch_id);
    st.bind_id(o + 8, r.k.op.value);
  });
  s.memcpy.insert(b.memcpys, [&](Statement& st, int o, const MemcpyRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind(o + 2, std::int64_t{r.stream.value});
    st.bind(o + 3, r.start_ns);
    st.bind(o + 4, r.end_ns);
    st.bind(o + 5, r.bytes);
    st.bind(o + 6, static_cast<std::int64_t>(r.copy_kind));
    st.bind(o + 7, static_cast<std::int64_t>(r.src_kind));
    st.bind(o + 8, static_cast<std::int64_t>(r.dst_kind));
    corr(st, o + 9, r.correlation_id);
    st.bind_id(o + 10, r.op.value);
  });
  s.memset.insert(b.memsets, [&](Statement& st, int o, const MemsetRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind(o + 2, std::int64_t{r.stream.value});
    st.bind(o + 3, r.start_ns);
    st.bind(o + 4, r.end_ns);
    st.bind(o + 5, r.bytes);
    if (r.value) st.bind(o + 6, std::int64_t{*r.value}); else st.bind_null(o + 6);
    corr(st, o + 7, r.correlation_id);
    st.bind_id(o + 8, r.op.value);
  });
  s.memory_event.insert(b.memory_events, [&](Statement& st, int o, const MemoryEventRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind(o + 2, r.ts_ns);
    st.bind(o + 3, std::int64_t{r.alloc ? 1 : 0});
    st.bind(o + 4, static_cast<std::int64_t>(r.address));
    st.bind(o + 5, r.bytes);
    st.bind(o + 6, static_cast<std::int64_t>(r.memory_kind));
    st.bind_id(o + 7, r.stream.value);
    corr(st, o + 8, r.correlation_id);
    st.bind_id(o + 9, r.buffer.value);
    st.bind(o + 10, next_memory_event_id_++);  // memory_events has no rowid to number it
  });
  s.api_call.insert(b.api_calls, [](Statement& st, int o, const ApiCallRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind(o + 2, r.thread_id);
    st.bind(o + 3, r.start_ns);
    st.bind(o + 4, r.end_ns);
    st.bind(o + 5, static_cast<std::int64_t>(r.api));
    st.bind(o + 6, std::int64_t{r.name.value});
    st.bind(o + 7, r.correlation_id);
    st.bind(o + 8, std::int64_t{r.return_code});
  });
  s.sync.insert(b.syncs, [&](Statement& st, int o, const SyncRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind_id(o + 2, r.stream.value);
    st.bind(o + 3, r.start_ns);
    st.bind(o + 4, r.end_ns);
    st.bind(o + 5, std::int64_t{r.kind});
    corr(st, o + 6, r.correlation_id);
    st.bind_id(o + 7, r.wait_stream.value);
    corr(st, o + 8, r.event_record_correlation_id);
  });
  s.overhead.insert(b.overheads, [](Statement& st, int o, const OverheadRecord& r) {
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind_id(o + 2, r.thread_id);
    st.bind(o + 3, r.start_ns);
    st.bind(o + 4, r.end_ns);
    st.bind(o + 5, r.kind);
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
  s.nvtx.insert(b.nvtx, [this, &autograd, &shapes](Statement& st, int o, const NvtxRangeRecord& r) {
    if (r.autograd_seq) autograd.push_back({next_nvtx_id_, *r.autograd_seq, r.autograd_backward});
    if (!r.input_dims.empty()) shapes.push_back({next_nvtx_id_, &r});
    st.hash_only(o + 11, next_nvtx_id_++);  // the rowid SQLite gives the row: the loader reads it
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind(o + 2, r.thread_id);
    st.bind(o + 3, r.start_ns);
    st.bind_id(o + 4, r.end_ns);
    st.bind_id(o + 5, r.domain.value);
    st.bind(o + 6, std::int64_t{r.name.value});
    st.bind_id(o + 7, r.category);
    st.bind_id(o + 8, r.color);
    if (r.payload_int) st.bind(o + 9, *r.payload_int); else st.bind_null(o + 9);
    if (r.payload_double) st.bind(o + 10, *r.payload_double); else st.bind_null(o + 10);
  });
  s.autograd.insert(autograd, [](Statement& st, int o, const AutogradRow& r) {
    st.bind(o + 1, r.nvtx_id);
    st.bind(o + 2, r.sequence);
    st.bind(o + 3, std::int64_t{r.backward ? 1 : 0});
  });
  s.input_shapes.insert(shapes, [](Statement& st, int o, const ShapeRow& r) {
    st.bind(o + 1, r.nvtx_id);
    st.bind(o + 2, r.r->input_dims);
    bind_text_or_null(st, o + 3, r.r->input_types);
  });
  // Sequence numbers in a table of their own (collective_seq), keyed by the
  // rowid SQLite gives the collectives row, so that readers that predate it
  // read collectives as before.
  std::vector<std::pair<std::int64_t, std::int64_t>> seqs;  // (collectives rowid, seq)
  s.collective.insert(b.collectives, [&](Statement& st, int o, const CollectiveRecord& r) {
    if (r.seq >= 0) seqs.emplace_back(next_collective_id_, r.seq);
    ++next_collective_id_;
    st.bind(o + 1, std::int64_t{r.rank.value});
    st.bind_id(o + 2, r.stream.value);
    st.bind(o + 3, r.start_ns);
    st.bind(o + 4, r.end_ns);
    corr(st, o + 5, r.correlation_id);
    st.bind(o + 6, r.name);
    st.bind_id(o + 7, r.in_nelems);
    st.bind_id(o + 8, r.out_nelems);
    bind_text_or_null(st, o + 9, r.dtype);
    st.bind_id(o + 10, r.group_size);
    bind_text_or_null(st, o + 11, r.group_ranks);
    bind_text_or_null(st, o + 12, r.process_group);
    bind_text_or_null(st, o + 13, r.in_splits);
    bind_text_or_null(st, o + 14, r.out_splits);
  });
  s.collective_seq.insert(seqs, [](Statement& st, int o, const std::pair<std::int64_t, std::int64_t>& r) {
    st.bind(o + 1, r.first);
    st.bind(o + 2, r.second);
  });
  join_links(b);
  if (options_.integrity_record)
    for (const auto& op : b.ops) op_links_digest_.add(op_link_hash(op.r.id.value, op.deps, op.buffers));
  s.op.insert(b.ops, [](Statement& st, int o, const PendingOp& p) {
    const OpRangeRecord& r = p.r;
    st.bind(o + 1, r.id.value);
    st.bind(o + 2, std::int64_t{r.rank.value});
    st.bind(o + 3, std::int64_t{r.stream.value});
    st.bind(o + 4, static_cast<std::int64_t>(r.kind));
    st.bind_id(o + 5, r.name.value);
    st.bind_id(o + 6, r.layer);
    st.bind_id(o + 7, r.iteration);
    st.bind_id(o + 8, r.micro_batch);
    st.bind_id(o + 9, r.chunk);
    st.bind(o + 10, static_cast<std::int64_t>(r.phase));
    st.bind(o + 11, r.start_ns);
    st.bind(o + 12, r.end_ns);
    st.bind_id(o + 13, r.launch_start_ns);
    st.bind_id(o + 14, r.launch_end_ns);
    if (r.flops >= 0) st.bind(o + 15, r.flops); else st.bind_null(o + 15);
    st.bind_id(o + 16, r.bytes);
    st.bind_id(o + 17, r.peer.value);
    st.bind_id(o + 18, r.nvtx_id);
    bind_text_or_null(st, o + 19, p.deps);
    bind_text_or_null(st, o + 20, p.buffers);
  });
  // Received bytes in a table of their own (op_recv_bytes), so that readers
  // that predate it read op_ranges as before.
  std::vector<std::pair<std::int64_t, std::int64_t>> received;  // (op id, bytes)
  for (const auto& p : b.ops)
    if (p.r.recv_bytes >= 0) received.emplace_back(p.r.id.value, p.r.recv_bytes);
  s.op_recv_bytes.insert(received, [](Statement& st, int o, const std::pair<std::int64_t, std::int64_t>& r) {
    st.bind(o + 1, r.first);
    st.bind(o + 2, r.second);
  });
  s.buffer.insert(b.buffers, [](Statement& st, int o, const BufferRecord& r) {
    st.bind(o + 1, r.id.value);
    st.bind(o + 2, std::int64_t{r.rank.value});
    st.bind_static(o + 3, r.tag);
    st.bind(o + 4, r.bytes);
    st.bind(o + 5, static_cast<std::int64_t>(r.memory_kind));
    st.bind_id(o + 6, r.layer);
    st.bind_id(o + 7, r.chunk);
    st.bind_id(o + 8, r.alloc_ns);
    st.bind_id(o + 9, r.free_ns);
    if (r.address != 0) st.bind(o + 10, static_cast<std::int64_t>(r.address)); else st.bind_null(o + 10);
  });
  s.expert_load.insert(b.expert_load, [](Statement& st, int o, const ExpertLoadRecord& r) {
    st.bind(o + 1, std::int64_t{r.iteration});
    st.bind(o + 2, std::int64_t{r.layer});
    st.bind(o + 3, std::int64_t{r.src_rank});
    st.bind(o + 4, std::int64_t{r.expert});
    st.bind(o + 5, r.tokens);
  });
  s.placement.insert(b.placements, [](Statement& st, int o, const ExpertPlacementRecord& r) {
    st.bind(o + 1, std::int64_t{r.iteration});
    st.bind(o + 2, std::int64_t{r.layer});
    st.bind(o + 3, std::int64_t{r.expert});
    st.bind(o + 4, std::int64_t{r.rank});
    st.bind(o + 5, r.role);
  });
}

}  // namespace moetrace::instrument
