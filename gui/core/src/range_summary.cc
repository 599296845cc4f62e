#include "moetrace/gui/range_summary.h"

#include <algorithm>
#include <map>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/interval.h"

namespace moetrace::gui {

RangeSummary summarize_range(const TimelineModel& model, std::int64_t t0, std::int64_t t1) {
  RangeSummary out;
  out.t0_ns = std::min(t0, t1);
  out.t1_ns = std::max(t0, t1);
  const auto& t = model.trace();
  std::map<RankId, std::vector<analyzer::LabelledInterval>> per_rank;
  std::map<RankId, std::int64_t> events;
  for (const auto& g : model.groups()) per_rank[g.rank];
  auto clip = [&](std::int64_t s, std::int64_t e, Category c, RankId rank) {
    s = std::max(s, out.t0_ns);
    e = std::min(e, out.t1_ns);
    ++events[rank];
    if (e > s) per_rank[rank].push_back({s, e, static_cast<std::uint32_t>(c)});
  };
  for (const auto& row : model.rows()) {
    if (row.kind != RowKind::kActivities && row.kind != RowKind::kOps) continue;
    auto [first, last] = model.visible_range(row, static_cast<double>(out.t0_ns), static_cast<double>(out.t1_ns));
    for (std::size_t p = first; p < last; ++p) {
      const std::uint32_t i = row.items[p];
      if (row.kind == RowKind::kActivities) {
        const auto& a = t.activities[i];
        if (a.end_ns < out.t0_ns) continue;
        const Category c = a.op >= 0 && static_cast<std::size_t>(a.op) < t.ops.size()
                               ? op_category(t.ops[static_cast<std::size_t>(a.op)].kind)
                               : analyzer::classify_activity(t, a);
        clip(a.start_ns, a.end_ns, c, a.rank);
      } else {
        const auto& o = t.ops[i];
        if (o.end_ns < out.t0_ns || model.op_has_activity(i)) continue;
        clip(o.start_ns, o.end_ns, op_category(o.kind), o.rank);
      }
    }
  }
  std::uint32_t comm_mask = 0, compute_mask = 0;
  for (int c = 0; c < kNumCategories; ++c) {
    if (is_communication(static_cast<Category>(c))) comm_mask |= 1u << c;
    if (is_computation(static_cast<Category>(c))) compute_mask |= 1u << c;
  }
  out.total.events = 0;
  for (auto& [rank, intervals] : per_rank) {
    RangeRankSummary s;
    s.rank = rank;
    s.events = events[rank];
    const auto cov = analyzer::Coverage::sweep(std::move(intervals));
    for (int c = 0; c < kNumCategories; ++c)
      s.category_ns[static_cast<std::size_t>(c)] = cov.active(static_cast<std::uint32_t>(c));
    s.busy_ns = cov.any(~0u);
    s.idle_ns = out.length() - s.busy_ns;
    s.comm_ns = cov.any(comm_mask);
    s.comm_hidden_ns = cov.overlap(comm_mask, compute_mask);
    for (int c = 0; c < kNumCategories; ++c)
      out.total.category_ns[static_cast<std::size_t>(c)] += s.category_ns[static_cast<std::size_t>(c)];
    out.total.busy_ns += s.busy_ns;
    out.total.idle_ns += s.idle_ns;
    out.total.comm_ns += s.comm_ns;
    out.total.comm_hidden_ns += s.comm_hidden_ns;
    out.total.events += s.events;
    out.ranks.push_back(s);
  }
  return out;
}

}  // namespace moetrace::gui
