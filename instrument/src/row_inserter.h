// The trace writer's batched inserts, one per table, and the integrity
// digests it keeps of them (schema/integrity.h). Private to trace_writer.cc.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/sqlite.h"

namespace moetrace::instrument {

// How the writer spells "absent" in a column, beside plain values: each binds
// NULL where its test says absent, else its value.
template <class T>
struct NullIf {
  T value;
  bool null;
};
template <class T>
NullIf<T> known(T v) { return {v, v < 0}; }  // negative: unknown (ids, times, sizes)
template <class T>
NullIf<T> positive(T v) { return {v, v <= 0}; }  // 0 or less: none (correlation ids)
template <class T>
NullIf<T> nonzero(T v) { return {v, v == 0}; }  // 0: none (addresses)
// Text that outlives the statement's run, bound without a copy; TextOrNull
// binds NULL for "" (the writer's "absent").
struct StaticText {
  std::string_view value;
};
struct TextOrNull {
  std::string_view value;
};

template <class T>
inline constexpr bool kOptional = false;
template <class T>
inline constexpr bool kOptional<std::optional<T>> = true;
template <class T>
inline constexpr bool kNullIf = false;
template <class T>
inline constexpr bool kNullIf<NullIf<T>> = true;

// Text, or NULL for "" (the writer's "absent").
template <class St>
void bind_text_or_null(St& st, int i, std::string_view s) {
  if (s.empty()) st.bind_null(i); else st.bind_static(i, s);
}

// Binds one row's values into a statement (parameters offset + 1 ...) and
// hashes them at their column positions, the first `hashed` columns.
class RowBinder {
 public:
  RowBinder(sqlite::Statement& st, int offset, int hashed) : st_(st), offset_(offset), hashed_(hashed) {}

  // The row's values in column order: integers, enums and bools as integers,
  // floating point as reals, other text copied, std::optional and the
  // wrappers above as NULL where absent.
  template <class... Vs>
  void row(const Vs&... values) {
    int i = offset_;
    (put(++i, values), ...);
    bound_ += static_cast<int>(sizeof...(Vs));
  }
  int bound() const { return bound_; }
  // A value of the row that SQLite assigns (a rowid), in column `column`
  // (1-based) of the row.
  void hash_only(int column, std::int64_t v) { hash_.add_int(column - 1, v); }
  std::uint64_t hash() const { return hash_.value(); }

  void bind_static(int i, std::string_view v) {
    st_.bind_static(i, v);
    if (hashes(i)) hash_.add_text(i - 1 - offset_, v);
  }
  void bind_null(int i) {
    st_.bind_null(i);
    if (hashes(i)) hash_.add_null(i - 1 - offset_);
  }

 private:
  template <class V>
  void put(int i, const V& v) {
    if constexpr (kNullIf<V>) {
      if (v.null) bind_null(i); else put(i, v.value);
    } else if constexpr (kOptional<V>) {
      if (v) put(i, *v); else bind_null(i);
    } else if constexpr (std::is_same_v<V, StaticText>) {
      bind_static(i, v.value);
    } else if constexpr (std::is_same_v<V, TextOrNull>) {
      bind_text_or_null(*this, i, v.value);
    } else if constexpr (std::is_same_v<V, bool>) {
      bind(i, std::int64_t{v ? 1 : 0});
    } else if constexpr (std::is_integral_v<V> || std::is_enum_v<V>) {
      bind(i, static_cast<std::int64_t>(v));
    } else if constexpr (std::is_floating_point_v<V>) {
      bind(i, static_cast<double>(v));
    } else {
      bind(i, std::string_view(v));
    }
  }
  void bind(int i, std::int64_t v) {
    st_.bind(i, v);
    if (hashes(i)) hash_.add_int(i - 1 - offset_, v);
  }
  void bind(int i, double v) {
    st_.bind(i, v);
    if (hashes(i)) hash_.add_real(i - 1 - offset_, v);
  }
  void bind(int i, std::string_view v) {
    st_.bind(i, v);
    if (hashes(i)) hash_.add_text(i - 1 - offset_, v);
  }
  bool hashes(int i) const { return i - 1 - offset_ < hashed_; }
  sqlite::Statement& st_;
  int offset_, hashed_;
  int bound_ = 0;
  schema::RowHash hash_;
};

// How an Inserter keeps its table's digest: while binding (tables only ever
// appended to), or not (tables with INSERT OR REPLACE, read back at close).
// kNone: no digest (a writer without the integrity record).
enum class Digest { kWhileBinding, kReadBack, kNone };

// Inserts rows into one table, kBatch rows per statement where it can: SQLite's
// cost per row is mostly per statement step, so multi-row VALUES lists double
// the insert rate of narrow tables (see BENCHMARKS.md).
class Inserter {
 public:
  static constexpr std::size_t kBatch = 64;

  Inserter(sqlite::Database& db, std::string_view table, std::initializer_list<const char*> columns,
           std::string_view verb = "INSERT", Digest digest = Digest::kWhileBinding, int hashed_columns = -1)
      : db_(db),
        table_(table),
        verb_(verb),
        columns_(columns),
        cols_(static_cast<int>(columns.size())),
        hashed_(hashed_columns < 0 ? cols_ : hashed_columns),
        digest_mode_(digest) {}

  // bind(binder, row), binding the row with binder.row(...). The statements are
  // prepared on first use: a small trace leaves most tables empty, and
  // preparing 64-row statements is not free.
  template <class Rows, class Bind>
  void insert(const Rows& rows, Bind&& bind) {
    std::size_t i = 0;
    if (rows.size() >= kBatch && !batch_) batch_.emplace(db_, sql(kBatch));
    for (; i + kBatch <= rows.size(); i += kBatch) {
      for (std::size_t b = 0; b < kBatch; ++b) bind_row(*batch_, static_cast<int>(b) * cols_, rows[i + b], bind);
      batch_->run();
    }
    if (i < rows.size() && !single_) single_.emplace(db_, sql(1));
    for (; i < rows.size(); ++i) {
      bind_row(*single_, 0, rows[i], bind);
      single_->run();
    }
  }

  const std::string& table() const { return table_; }
  void disable_digest() { digest_mode_ = Digest::kNone; }
  // The table's digest: as bound, or (kReadBack) read from the database now.
  schema::TableDigest digest(sqlite::Database& db) const {
    if (digest_mode_ == Digest::kWhileBinding) return digest_;
    std::string q = "SELECT ";
    for (std::size_t c = 0; c < columns_.size(); ++c) q += (c ? ", " : "") + std::string(columns_[c]);
    auto st = db.prepare(q + " FROM " + table_);
    schema::TableDigest d;
    while (st.step()) d.add_row(st, hashed_);
    return d;
  }

 private:
  template <class Row, class Bind>
  void bind_row(sqlite::Statement& st, int offset, const Row& row, Bind& bind) {
    RowBinder binder(st, offset, digest_mode_ == Digest::kWhileBinding ? hashed_ : 0);
    bind(binder, row);
    // A row short of its table's columns would leave the rest bound to the
    // previous row's values (or NULL): a bug of the writer, never of input.
    if (binder.bound() != cols_)
      throw Error("trace writer: " + table_ + " bound " + std::to_string(binder.bound()) + " of its " +
                  std::to_string(cols_) + " columns");
    if (digest_mode_ == Digest::kWhileBinding) digest_.add(binder.hash());
  }

  std::string sql(std::size_t rows) const {
    std::string s = verb_ + " INTO " + table_ + "(";
    bool first = true;
    for (const char* c : columns_) {
      s += first ? "" : ", ";
      s += c;
      first = false;
    }
    s += ") VALUES ";
    // Plain "?" numbers the parameters 1, 2, ... left to right as "?NNN"
    // would, without SQLite's list of numbered names, which it searches once
    // per parameter (quadratic: preparing the 64-row statements took 18 % of
    // a small import).
    for (std::size_t r = 0; r < rows; ++r) {
      s += r ? ", (" : "(";
      for (std::size_t c = 0; c < columns_.size(); ++c) s += c ? ", ?" : "?";
      s += ")";
    }
    return s;
  }

  sqlite::Database& db_;
  std::string table_, verb_;
  std::vector<const char*> columns_;
  int cols_, hashed_;
  Digest digest_mode_;
  schema::TableDigest digest_;
  std::optional<sqlite::Statement> single_, batch_;
};

// op_ranges columns before deps and buffers: the digest "op_ranges" covers
// them, "op_links" the two others (the writer updates them after the row).
constexpr int kOpLinkColumn = schema::kOpLinkColumn;

struct TraceWriter::Statements {
  explicit Statements(sqlite::Database& db)
      : string(db, "strings", {"id", "value"}),
        config(db, "run_config", {"key", "value"}, "INSERT OR REPLACE", Digest::kReadBack),
        launch(db, "launch_configs",
               {"id", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                "shared_bytes", "registers"}),
        device(db, "devices",
               {"id", "name", "uuid", "compute_major", "compute_minor", "sm_count",
                "memory_bytes", "simulated"},
               "INSERT OR REPLACE", Digest::kReadBack),
        rank(db, "ranks", {"rank", "device_id", "local_rank", "host", "pid"}, "INSERT OR REPLACE", Digest::kReadBack),
        stream(db, "streams", {"id", "rank", "device_id", "native_id", "role", "name", "priority"},
               "INSERT OR REPLACE", Digest::kReadBack),
        layer(db, "layers",
              {"layer", "kind", "num_experts", "top_k", "model_dim", "hidden_dim", "tokens"},
              "INSERT OR REPLACE", Digest::kReadBack),
        kernel(db, "kernels",
               {"rank", "stream_id", "start_ns", "end_ns", "name_id", "correlation_id",
                "launch_id", "op_id"}),
        memcpy(db, "memcpy",
               {"rank", "stream_id", "start_ns", "end_ns", "bytes", "copy_kind", "src_kind",
                "dst_kind", "correlation_id", "op_id"}),
        memset(db, "memset",
               {"rank", "stream_id", "start_ns", "end_ns", "bytes", "value", "correlation_id",
                "op_id"}),
        memory_event(db, "memory_events",
                     {"rank", "ts_ns", "kind", "address", "bytes", "memory_kind", "stream_id",
                      "correlation_id", "buffer_id", "id"}),
        api_call(db, "api_calls",
                 {"rank", "thread_id", "start_ns", "end_ns", "api", "name_id", "correlation_id",
                  "return_code"}),
        sync(db, "sync_events",
             {"rank", "stream_id", "start_ns", "end_ns", "kind", "correlation_id", "wait_stream_id",
              "event_record_correlation_id"}),
        overhead(db, "overhead", {"rank", "thread_id", "start_ns", "end_ns", "kind"}),
        nvtx(db, "nvtx_ranges",
             {"rank", "thread_id", "start_ns", "end_ns", "domain_id", "name_id", "category",
              "color", "payload_int", "payload_double"}),
        autograd(db, "autograd_ranges", {"nvtx_id", "sequence", "backward"}),
        input_shapes(db, "input_shapes", {"nvtx_id", "input_dims", "input_types"}),
        collective(db, "collectives",
                   {"rank", "stream_id", "start_ns", "end_ns", "correlation_id", "name",
                    "in_nelems", "out_nelems", "dtype", "group_size", "group_ranks",
                    "process_group", "in_splits", "out_splits"}),
        collective_seq(db, "collective_seq", {"collective_id", "seq"}),
        op(db, "op_ranges",
           {"id", "rank", "stream_id", "kind", "name_id", "layer", "iteration", "micro_batch",
            "chunk", "phase", "start_ns", "end_ns", "launch_start_ns", "launch_end_ns", "flops",
            "bytes", "peer_rank", "nvtx_id", "deps", "buffers"},
           "INSERT", Digest::kWhileBinding, kOpLinkColumn),
        op_recv_bytes(db, "op_recv_bytes", {"op_id", "bytes"}),
        buffer(db, "buffers",
               {"id", "rank", "tag", "bytes", "memory_kind", "layer", "chunk", "alloc_ns",
                "free_ns", "address"},
               "INSERT OR REPLACE", Digest::kReadBack),
        expert_load(db, "expert_load", {"iteration", "layer", "src_rank", "expert", "tokens"},
                    "INSERT OR REPLACE", Digest::kReadBack),
        placement(db, "expert_placement", {"iteration", "layer", "expert", "rank", "role"},
                  "INSERT OR REPLACE", Digest::kReadBack) {}

  Inserter string, config, launch, device, rank, stream, layer, kernel, memcpy, memset,
      memory_event, api_call, sync, overhead, nvtx, autograd, input_shapes, collective, collective_seq, op,
      op_recv_bytes, buffer, expert_load, placement;

  std::array<Inserter*, 24> all() {
    return {&string, &config, &launch, &device, &rank, &stream, &layer, &kernel, &memcpy, &memset,
            &memory_event, &api_call, &sync, &overhead, &nvtx, &autograd, &input_shapes, &collective, &collective_seq,
            &op, &op_recv_bytes, &buffer, &expert_load, &placement};
  }
};

// op_ranges.deps and .buffers of one op, hashed for the digest "op_links"
// (schema/integrity.h); "" is NULL in the table.
inline std::uint64_t op_link_hash(std::int64_t op, std::string_view deps, std::string_view buffers) {
  schema::RowHash h;
  h.add_int(0, op);
  if (deps.empty()) h.add_null(1); else h.add_text(1, deps);
  if (buffers.empty()) h.add_null(2); else h.add_text(2, buffers);
  return h.value();
}

}  // namespace moetrace::instrument
