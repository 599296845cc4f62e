// The timeline model's items: where each lies, its colour, name and label,
// hit testing and finding an item's row. Items of the replayed trace
// (ItemSource::kReplayed*) read the replayed trace and its spans.
#include <algorithm>
#include <cmath>
#include <limits>

#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

ItemSource measured_source(ItemSource s) {
  switch (s) {
    case ItemSource::kReplayedActivity: return ItemSource::kActivity;
    case ItemSource::kReplayedOp: return ItemSource::kOp;
    case ItemSource::kReplayedSpan: return ItemSource::kSpan;
    default: return s;
  }
}

std::pair<std::int64_t, std::int64_t> TimelineModel::item_extent(ItemRef r) const {
  const auto& t = trace_of(r);
  auto extent = [](const auto& x) { return std::pair<std::int64_t, std::int64_t>{x.start_ns, x.end_ns}; };
  switch (measured_source(r.source)) {
    case ItemSource::kActivity: return extent(t.activities[r.index]);
    case ItemSource::kOp: return extent(t.ops[r.index]);
    case ItemSource::kSpan: return extent(span(r));
    case ItemSource::kApiCall: return extent(t.api_calls[r.index]);
    case ItemSource::kNvtx: {
      // A range never closed (the process ended inside it) runs to the end.
      const auto& n = t.nvtx[r.index];
      return {n.start_ns, n.end_ns >= n.start_ns ? n.end_ns : std::max(n.start_ns, end_ns_)};
    }
    default: break;
  }
  return {0, 0};
}

ColourClass TimelineModel::item_colour(ItemRef r) const {
  const auto& t = trace_of(r);
  switch (measured_source(r.source)) {
    case ItemSource::kActivity: {
      const auto& colours = r.source == ItemSource::kActivity ? activity_colour_ : replayed_activity_colour_;
      return r.index < colours.size() ? colours[r.index] : colour_class(t, t.activities[r.index]);
    }
    case ItemSource::kOp: return colour_class(t.ops[r.index].kind);
    case ItemSource::kSpan: {
      const auto& s = span(r);
      return span_colour_class(s.phase, s.level != SpanLevel::kIteration);
    }
    case ItemSource::kApiCall: return ColourClass::kApiCall;
    case ItemSource::kNvtx: return ColourClass::kNvtx;
    default: break;
  }
  return ColourClass::kOtherCompute;
}

namespace {

std::string_view copy_kind_name(std::uint8_t k) {
  switch (static_cast<schema::CopyKind>(k)) {
    case schema::CopyKind::kHostToDevice: return "HtoD";
    case schema::CopyKind::kDeviceToHost: return "DtoH";
    case schema::CopyKind::kDeviceToDevice: return "DtoD";
    case schema::CopyKind::kHostToHost: return "HtoH";
    case schema::CopyKind::kPeerToPeer: return "PtoP";
    default: return "";
  }
}

}  // namespace

std::string TimelineModel::item_name(ItemRef r) const {
  const auto& t = trace_of(r);
  switch (measured_source(r.source)) {
    case ItemSource::kActivity: {
      const auto& a = t.activities[r.index];
      if (a.type == analyzer::ActivityType::kKernel) {
        auto n = t.str(a.name);
        return n.empty() ? std::string("kernel") : std::string(n);
      }
      if (a.type == analyzer::ActivityType::kMemset) return "memset";
      const auto k = copy_kind_name(a.copy_kind);
      return k.empty() ? std::string("memcpy") : "memcpy " + std::string(k);
    }
    case ItemSource::kOp: {
      const auto& o = t.ops[r.index];
      auto n = t.str(o.name);
      return n.empty() ? std::string(op_kind_name(o.kind)) : std::string(n);
    }
    case ItemSource::kSpan: return item_label(r);
    case ItemSource::kApiCall: {
      auto n = t.str(t.api_calls[r.index].name);
      return n.empty() ? std::string("API call") : std::string(n);
    }
    case ItemSource::kNvtx: {
      auto n = t.str(t.nvtx[r.index].name);
      return n.empty() ? std::string("NVTX range") : std::string(n);
    }
    default: break;
  }
  return {};
}

std::string TimelineModel::item_label(ItemRef r) const {
  switch (measured_source(r.source)) {
    case ItemSource::kActivity:
    case ItemSource::kApiCall:
    case ItemSource::kNvtx: return item_name(r);
    case ItemSource::kOp: {
      const auto& o = trace_of(r).ops[r.index];
      std::string s = item_name(r);
      if (o.layer >= 0) s += " L" + std::to_string(o.layer);
      if (o.chunk >= 0) s += " c" + std::to_string(o.chunk);
      return s;
    }
    case ItemSource::kSpan: {
      const auto& s = span(r);
      if (s.level == SpanLevel::kIteration) return "iteration " + std::to_string(s.iteration);
      std::string l;
      if (s.level == SpanLevel::kChunk) l = "chunk " + std::to_string(s.chunk) + " ";
      l += "L" + std::to_string(s.layer) + " " + std::string(phase_name(s.phase));
      if (s.micro_batch >= 0) l += " mb" + std::to_string(s.micro_batch);
      return l;
    }
    default: break;
  }
  return {};
}

std::pair<std::size_t, std::size_t> TimelineModel::visible_range(const Row& row, double t0, double t1) const {
  const std::size_t n = row.items.size();
  auto start_of = [&](std::size_t p) { return item_start(row_item(row, p)); };
  auto end_of = [&](std::size_t p) { return item_end(row_item(row, p)); };
  const std::size_t first = first_visible(n, t0, row.monotone, row.max_extent, start_of, end_of);
  std::size_t lo = first, hi = n;
  while (lo < hi) {  // starts are sorted in every row
    const std::size_t mid = lo + (hi - lo) / 2;
    if (static_cast<double>(start_of(mid)) <= t1) lo = mid + 1; else hi = mid;
  }
  return {first, lo};
}

std::optional<std::size_t> TimelineModel::hit_test(int row_index, double t, double tol) const {
  if (row_index < 0 || static_cast<std::size_t>(row_index) >= rows_.size()) return std::nullopt;
  const Row& row = rows_[static_cast<std::size_t>(row_index)];
  if (row.items.empty()) return std::nullopt;
  auto [first, last] = visible_range(row, t - tol, t + tol);
  // Prefer an item containing t (the shortest, where a row overlaps), then
  // the nearest edge. Candidates are few: a packed row does not overlap.
  std::optional<std::size_t> best;
  double best_key = std::numeric_limits<double>::infinity();
  constexpr std::size_t kScanLimit = 4096;
  if (last - first > kScanLimit && row.monotone) {
    // Zoomed far out: only the items next to t can be nearest.
    const std::size_t p = visible_range(row, t, t).first;
    first = p > 0 ? p - 1 : 0;
    last = std::min(p + 2, row.items.size());
  }
  for (std::size_t p = first; p < last && p < first + kScanLimit; ++p) {
    const ItemRef r = row_item(row, p);
    const double s = static_cast<double>(item_start(r)), e = static_cast<double>(item_end(r));
    double key;
    if (s <= t && t <= e) key = -1.0 / (1.0 + (e - s));  // containing: shorter is better, all < 0
    else key = std::min(std::fabs(s - t), std::fabs(e - t));
    if (key >= 0 && key > tol) continue;
    if (key < best_key) {
      best_key = key;
      best = p;
    }
  }
  return best;
}

std::optional<TimelineModel::Place> TimelineModel::place_of(ItemRef r) const {
  if (!r.valid()) return std::nullopt;
  if (is_replayed(r.source) && !replayed_) return std::nullopt;
  const auto& t = trace_of(r);
  std::int32_t stream = -1;
  std::int64_t thread = -1;
  RowKind kind = RowKind::kActivities;
  RankId rank;
  // A host event (API call or NVTX range): its rank and thread's row of `k`.
  auto on_thread = [&](const auto& events, RowKind k) {
    if (r.index >= events.size()) return false;
    rank = events[r.index].rank;
    thread = events[r.index].thread_id;
    kind = k;
    return true;
  };
  switch (measured_source(r.source)) {
    case ItemSource::kActivity:
      if (r.index >= t.activities.size()) return std::nullopt;
      stream = t.activities[r.index].stream;
      break;
    case ItemSource::kOp:
      if (r.index >= t.ops.size()) return std::nullopt;
      stream = t.ops[r.index].stream;
      kind = RowKind::kOps;
      break;
    case ItemSource::kSpan: {
      if (r.index >= (r.source == ItemSource::kSpan ? spans_ : replayed_spans_).size()) return std::nullopt;
      const auto& s = span(r);
      rank = s.rank;
      kind = s.level == SpanLevel::kIteration ? RowKind::kIterations
             : s.level == SpanLevel::kLayer   ? RowKind::kLayers
                                              : RowKind::kChunks;
      break;
    }
    case ItemSource::kApiCall:
      if (!on_thread(t.api_calls, RowKind::kApiCalls)) return std::nullopt;
      break;
    case ItemSource::kNvtx:
      if (!on_thread(t.nvtx, RowKind::kNvtx)) return std::nullopt;
      break;
    default: return std::nullopt;
  }
  if (is_replayed(r.source)) kind = RowKind::kReplayed;
  const ItemSource base = measured_source(r.source);
  const std::int64_t start = item_start(r);
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const Row& row = rows_[i];
    if (row.kind != kind || row.items.source() != r.source) continue;
    if (base == ItemSource::kSpan && row.rank != rank) continue;
    if ((base == ItemSource::kApiCall || base == ItemSource::kNvtx) && (row.rank != rank || row.thread != thread))
      continue;
    if ((base == ItemSource::kActivity || base == ItemSource::kOp) && row.stream != stream) continue;
    std::size_t lo = 0, hi = row.items.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (item_start(row_item(row, mid)) < start) lo = mid + 1; else hi = mid;
    }
    for (std::size_t p = lo; p < row.items.size() && item_start(row_item(row, p)) == start; ++p)
      if (row.items[p] == r.index) return Place{static_cast<int>(i), p};
  }
  return std::nullopt;
}

std::size_t TimelineModel::memory_bytes() const {
  std::size_t b = sizeof(*this) + (spans_.capacity() + replayed_spans_.capacity()) * sizeof(Span) +
                  op_has_activity_.capacity() / 8 +
                  (activity_colour_.capacity() + replayed_activity_colour_.capacity()) * sizeof(ColourClass);
  for (const auto& r : rows_) b += sizeof(Row) + r.items.memory_bytes() + r.lod.memory_bytes();
  for (const auto& c : counters_) b += c.memory_bytes();
  return b;
}

}  // namespace moetrace::gui
