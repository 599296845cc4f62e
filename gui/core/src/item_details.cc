#include "moetrace/gui/item_details.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "moetrace/analyzer/nvtx_projection.h"
#include "moetrace/gui/format.h"

namespace moetrace::gui {

std::string format_timestamp(double ns) {
  const double a = std::fabs(ns);
  const char* unit = "ns";
  double scale = 1;
  int decimals = 0;
  if (a >= 1e9) {
    unit = "s", scale = 1e9, decimals = 9;
  } else if (a >= 1e6) {
    unit = "ms", scale = 1e6, decimals = 6;
  } else if (a >= 1e3) {
    unit = "\xC2\xB5s", scale = 1e3, decimals = 3;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, ns / scale, unit);
  return buf;
}

namespace {

class Writer {
 public:
  explicit Writer(std::vector<DetailField>& f) : f_(f) {}
  void add(std::string key, std::string value) { f_.push_back({std::move(key), std::move(value), false}); }
  void heading(std::string title) { f_.push_back({std::move(title), {}, true}); }
  void coord(const char* key, std::int32_t v) {
    if (v >= 0) add(key, std::to_string(v));
  }

 private:
  std::vector<DetailField>& f_;
};

void add_time(Writer& w, const TimelineModel& m, std::int64_t start, std::int64_t end) {
  w.add("Start", format_timestamp(static_cast<double>(start - m.start_ns())));
  w.add("Duration", format_duration(static_cast<double>(end - start)));
  w.add("End", format_timestamp(static_cast<double>(end - m.start_ns())));
}

std::string stream_text(const analyzer::Trace& t, std::int32_t stream) {
  if (stream < 0 || static_cast<std::size_t>(stream) >= t.streams.size()) return "?";
  const auto& s = t.streams[static_cast<std::size_t>(stream)];
  std::string out = s.name.empty() ? "stream " + std::to_string(s.id.value) : s.name;
  return out + " (" + s.role + ")";
}

void add_op_coordinates(Writer& w, const analyzer::OpRange& o) {
  w.add("Op kind", std::string(op_kind_name(o.kind)));
  w.add("Category", std::string(category_name(op_category(o.kind))));
  w.coord("Layer", o.layer);
  w.coord("Iteration", o.iteration);
  w.coord("Micro-batch", o.micro_batch);
  w.coord("Chunk", o.chunk);
  w.add("Phase", std::string(phase_name(o.phase)));
}

// Where an item of the replayed tracks comes from, and for a GPU activity
// where the measured trace has it (same rank and correlation id).
void add_replay_origin(Writer& w, const TimelineModel& m, ItemRef ref) {
  if (!is_replayed(ref.source)) return;
  w.add("Timeline", m.replay_label() == "predicted"
                        ? "predicted: the trace's execution graph after the what-if"
                        : "replayed: the trace's execution graph with the measured durations");
  if (ref.source != ItemSource::kReplayedActivity) return;
  const auto& a = m.trace_of(ref).activities[ref.index];
  if (a.correlation_id == 0) return;
  const auto& t = m.trace();
  for (std::uint32_t i = 0; i < t.activities.size(); ++i) {
    const auto& b = t.activities[i];
    if (b.rank != a.rank || b.correlation_id != a.correlation_id || b.stream != a.stream) continue;
    w.add("Measured start", format_timestamp(static_cast<double>(b.start_ns - m.start_ns())));
    w.add("Measured duration", format_duration(static_cast<double>(b.duration())));
    return;
  }
}

void describe_activity(Writer& w, const TimelineModel& m, ItemRef ref) {
  const auto& t = m.trace_of(ref);
  const auto& a = t.activities[ref.index];
  const ItemSource op_source = is_replayed(ref.source) ? ItemSource::kReplayedOp : ItemSource::kOp;
  w.add("Name", m.item_name(ref));
  w.add("Type", a.type == analyzer::ActivityType::kKernel   ? "kernel"
                : a.type == analyzer::ActivityType::kMemcpy ? "memcpy"
                                                            : "memset");
  w.add("Colour class", std::string(colour_class_name(m.item_colour(ref))));
  add_time(w, m, a.start_ns, a.end_ns);
  w.add("Rank", std::to_string(a.rank.value));
  w.add("Stream", stream_text(t, a.stream));
  if (a.type != analyzer::ActivityType::kKernel) {
    w.add("Bytes", format_bytes(static_cast<double>(a.bytes)) + " (" + format_count(a.bytes) + " B)");
    if (a.duration() > 0)
      w.add("Bandwidth", format_bytes(static_cast<double>(a.bytes) * 1e9 / static_cast<double>(a.duration())) + "/s");
  } else {
    if (const auto* lc = t.launch_config(a)) {
      if (lc->grid[0] >= 0)
        w.add("Grid", std::to_string(lc->grid[0]) + " x " + std::to_string(lc->grid[1]) + " x " +
                          std::to_string(lc->grid[2]));
      if (lc->block[0] >= 0)
        w.add("Block", std::to_string(lc->block[0]) + " x " + std::to_string(lc->block[1]) + " x " +
                           std::to_string(lc->block[2]));
      if (lc->registers >= 0) w.add("Registers / thread", std::to_string(lc->registers));
      if (lc->shared_bytes >= 0) w.add("Shared memory", format_bytes(lc->shared_bytes));
    }
  }
  if (a.op >= 0 && static_cast<std::size_t>(a.op) < t.ops.size()) {
    const auto& o = t.ops[static_cast<std::size_t>(a.op)];
    w.heading("Launched by op");
    w.add("Op", m.item_label({op_source, static_cast<std::uint32_t>(a.op)}));
    w.add("Op id", std::to_string(o.id.value));
    add_op_coordinates(w, o);
  } else {
    w.heading("Launched by op");
    w.add("Op", "none (classified by name)");
  }
  w.heading("API call");
  if (a.correlation_id == 0) {
    w.add("Call", "none recorded");
  } else if (const auto* api = t.launching_call(a)) {
    w.add("Call", std::string(t.str(api->name)));
    w.add("API", api->api == schema::ApiKind::kDriver ? "driver" : "runtime");
    w.add("Thread", std::to_string(api->thread_id));
    w.add("Call start", format_timestamp(static_cast<double>(api->start_ns - m.start_ns())));
    w.add("Call duration", format_duration(static_cast<double>(api->end_ns - api->start_ns)));
    w.add("Launch to start", format_duration(static_cast<double>(a.start_ns - api->start_ns)));
    w.add("Correlation id", std::to_string(a.correlation_id));
    if (api->return_code != 0) w.add("Return code", std::to_string(api->return_code));
  } else {
    w.add("Call", "not in the trace (correlation id " + std::to_string(a.correlation_id) + ")");
  }
}

void describe_op(Writer& w, const TimelineModel& m, ItemRef ref) {
  const auto& t = m.trace_of(ref);
  const auto i = ref.index;
  const auto& o = t.ops[i];
  const ItemSource activity_source = is_replayed(ref.source) ? ItemSource::kReplayedActivity : ItemSource::kActivity;
  w.add("Name", m.item_name(ref));
  w.add("Op id", std::to_string(o.id.value));
  add_op_coordinates(w, o);
  add_time(w, m, o.start_ns, o.end_ns);
  w.add("Rank", std::to_string(o.rank.value));
  w.add("Stream", stream_text(t, o.stream));
  if (o.peer.valid()) w.add("Peer rank", std::to_string(o.peer.value));
  if (o.flops >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", o.flops);
    w.add("FLOPs", buf);
  }
  if (o.bytes >= 0) w.add("Bytes", format_bytes(static_cast<double>(o.bytes)) + " (" + format_count(o.bytes) + " B)");
  if (o.launch_start_ns >= 0 && o.launch_end_ns >= o.launch_start_ns)
    w.add("Host launch", format_duration(static_cast<double>(o.launch_end_ns - o.launch_start_ns)) + " from " +
                             format_timestamp(static_cast<double>(o.launch_start_ns - m.start_ns())));
  // GPU work of the op: activities of its rank inside its range that name it.
  std::int64_t count = 0, busy = 0;
  for (const auto& row : m.rows()) {
    if (row.items.source() != activity_source || row.rank != o.rank) continue;
    auto [first, last] = m.visible_range(row, static_cast<double>(o.start_ns), static_cast<double>(o.end_ns));
    for (std::size_t p = first; p < last; ++p) {
      const auto& a = t.activities[row.items[p]];
      if (a.op == static_cast<std::int32_t>(i)) {
        ++count;
        busy += a.duration();
      }
    }
  }
  w.heading("GPU activities");
  if (count == 0) {
    const bool has = is_replayed(ref.source) ? false : m.op_has_activity(i);
    w.add("Activities", has ? "outside the op range" : "none attributed (its own range counts)");
  } else {
    w.add("Activities", format_count(count));
    w.add("Activity time", format_duration(static_cast<double>(busy)));
  }
}

void describe_span(Writer& w, const TimelineModel& m, ItemRef ref) {
  const auto& s = m.span(ref);
  w.add("Span", s.level == SpanLevel::kIteration ? "iteration" : s.level == SpanLevel::kLayer ? "MoE layer" : "chunk");
  w.add("Rank", std::to_string(s.rank.value));
  w.coord("Iteration", s.iteration);
  w.coord("Layer", s.layer);
  if (s.level != SpanLevel::kIteration) w.add("Phase", std::string(phase_name(s.phase)));
  w.coord("Micro-batch", s.micro_batch);
  w.coord("Chunk", s.chunk);
  add_time(w, m, s.start_ns, s.end_ns);
  w.add("Op ranges", format_count(s.ops));
}

void describe_api_call(Writer& w, const TimelineModel& m, std::uint32_t i) {
  const auto& t = m.trace();
  const auto& a = t.api_calls[i];
  w.add("Name", m.item_name({ItemSource::kApiCall, i}));
  w.add("API", a.api == schema::ApiKind::kDriver ? "driver" : "runtime");
  add_time(w, m, a.start_ns, a.end_ns);
  w.add("Rank", std::to_string(a.rank.value));
  w.add("Thread", std::to_string(a.thread_id));
  w.add("Correlation id", std::to_string(a.correlation_id));
  if (a.return_code != 0) w.add("Return code", std::to_string(a.return_code));
  // What it launched: the activity with its correlation id, looked for on
  // the rank in the second after the call (launches run ahead of the GPU).
  constexpr std::int64_t kHorizonNs = 1'000'000'000;
  constexpr std::size_t kScanLimit = 200'000;
  std::size_t scanned = 0;
  std::optional<std::uint32_t> launched;
  for (const auto& row : m.rows()) {
    if (row.kind != RowKind::kActivities || row.rank != a.rank || launched || a.correlation_id == 0) continue;
    auto [first, last] = m.visible_range(row, static_cast<double>(a.start_ns), static_cast<double>(a.start_ns + kHorizonNs));
    for (std::size_t p = first; p < last && scanned < kScanLimit; ++p, ++scanned)
      if (t.activities[row.items[p]].correlation_id == a.correlation_id) {
        launched = row.items[p];
        break;
      }
  }
  w.heading("Launched");
  if (launched) {
    const auto& act = t.activities[*launched];
    w.add("Activity", m.item_name({ItemSource::kActivity, *launched}));
    w.add("Activity start", format_timestamp(static_cast<double>(act.start_ns - m.start_ns())));
    w.add("Launch to start", format_duration(static_cast<double>(act.start_ns - a.start_ns)));
    w.add("Activity duration", format_duration(static_cast<double>(act.duration())));
  } else {
    w.add("Activity", a.correlation_id == 0 ? "none" : "none found in the second after the call");
  }
}

void describe_nvtx(Writer& w, const TimelineModel& m, std::uint32_t i) {
  const auto& t = m.trace();
  const auto& n = t.nvtx[i];
  w.add("Name", m.item_name({ItemSource::kNvtx, i}));
  if (n.domain.valid()) w.add("Domain", std::string(t.str(n.domain)));
  if (n.end_ns >= n.start_ns) {
    add_time(w, m, n.start_ns, n.end_ns);
  } else {
    w.add("Start", format_timestamp(static_cast<double>(n.start_ns - m.start_ns())));
    w.add("End", "never closed (the process ended inside it)");
  }
  w.add("Rank", std::to_string(n.rank.value));
  w.add("Thread", std::to_string(n.thread_id));
  if (n.has_payload_int) w.add("Payload", std::to_string(n.payload_int));
  // GPU projection: the work launched from inside the range on its thread.
  const auto p = analyzer::project_nvtx_range(t, n);
  if (p.activities == 0) {
    w.add("GPU projection", p.api_calls == 0 ? "no API call inside the range" : "no GPU activity launched");
  } else {
    w.add("GPU projection", std::to_string(p.activities) + " activit" + (p.activities == 1 ? "y" : "ies") +
                                " from " + std::to_string(p.api_calls) + " API call" + (p.api_calls == 1 ? "" : "s"));
    w.add("GPU span", format_timestamp(static_cast<double>(p.gpu_start_ns - m.start_ns())) + " - " +
                          format_timestamp(static_cast<double>(p.gpu_end_ns - m.start_ns())));
    w.add("GPU busy", format_duration(static_cast<double>(p.gpu_busy_ns)));
  }
}

}  // namespace

std::vector<DetailField> describe_item(const TimelineModel& model, ItemRef item) {
  std::vector<DetailField> f;
  Writer w(f);
  if (is_replayed(item.source) && !model.replayed_trace()) return f;
  const auto& t = model.trace_of(item);
  switch (item.source) {
    case ItemSource::kActivity:
    case ItemSource::kReplayedActivity:
      if (item.index < t.activities.size()) describe_activity(w, model, item);
      break;
    case ItemSource::kOp:
    case ItemSource::kReplayedOp:
      if (item.index < t.ops.size()) describe_op(w, model, item);
      break;
    case ItemSource::kSpan:
      if (item.index < model.spans().size()) describe_span(w, model, item);
      break;
    case ItemSource::kReplayedSpan:
      if (item.index < model.replayed_spans().size()) describe_span(w, model, item);
      break;
    case ItemSource::kApiCall:
      if (item.index < model.trace().api_calls.size()) describe_api_call(w, model, item.index);
      break;
    case ItemSource::kNvtx:
      if (item.index < model.trace().nvtx.size()) describe_nvtx(w, model, item.index);
      break;
    case ItemSource::kNone: break;
  }
  add_replay_origin(w, model, item);
  return f;
}

}  // namespace moetrace::gui
