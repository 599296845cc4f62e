// TimelineModel::with_replay: the tracks of a replayed trace under each
// rank's stream tracks of the measured one.
#include <algorithm>
#include <stdexcept>

#include "moetrace/gui/timeline_model.h"
#include "timeline_build.h"

namespace moetrace::gui {

class ReplayRowsBuilder {
 public:
  ReplayRowsBuilder(const TimelineModel& base, std::shared_ptr<const analyzer::Trace> replayed,
                    const ReplayRowOptions& options)
      : options_(options), m_(base) {
    if (!replayed) throw std::invalid_argument("with_replay: no replayed trace");
    const auto& t = *replayed;
    const auto& measured = base.trace();
    bool same = t.streams.size() == measured.streams.size();
    for (std::size_t s = 0; same && s < t.streams.size(); ++s)
      same = t.streams[s].rank == measured.streams[s].rank && t.streams[s].id == measured.streams[s].id;
    if (!same) throw std::invalid_argument("with_replay: the replayed trace has other streams than the trace shown");
    m_.replayed_ = std::move(replayed);
    m_.replay_label_ = options.prefix;
  }

  std::shared_ptr<const TimelineModel> build() {
    const auto& t = *m_.replayed_;
    m_.replayed_activity_colour_ = detail::activity_colours(t);
    m_.replayed_spans_ = options_.span_rows ? detail::derive_spans(t) : std::vector<Span>{};
    extend_extent(t);
    lay_out_rows();
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < m_.rows_.size(); ++i)
      if (m_.rows_[i].replayed()) todo.push_back(i);
    detail::build_pyramids(m_, m_.rows_, std::move(todo), options_.threads);
    return std::shared_ptr<const TimelineModel>(new TimelineModel(std::move(m_)));
  }

 private:
  // A prediction may run past the measured trace's end.
  void extend_extent(const analyzer::Trace& t) {
    for (const auto& a : t.activities) {
      m_.start_ns_ = std::min(m_.start_ns_, a.start_ns);
      m_.end_ns_ = std::max(m_.end_ns_, a.end_ns);
    }
    for (const auto& o : t.ops) {
      m_.start_ns_ = std::min(m_.start_ns_, o.start_ns);
      m_.end_ns_ = std::max(m_.end_ns_, o.end_ns);
    }
  }

  // Base's rows of each group up to the end of its stream tracks, the
  // replayed tracks, then the rest of the group (memory, host threads).
  void lay_out_rows() {
    const auto& t = *m_.replayed_;
    const bool tracks_ok = t.activity_track_begin.size() == t.streams.size() + 1 &&
                           t.op_track_begin.size() == t.streams.size() + 1;
    const std::string prefix = options_.prefix + " \xC2\xB7 ";
    // m_ holds a copy of base's rows: move them into their new order.
    std::vector<Row> old = std::move(m_.rows_);
    std::vector<Row> rows;
    rows.reserve(old.size());
    for (std::size_t g = 0; g < m_.groups_.size(); ++g) {
      auto& group = m_.groups_[g];
      const auto b = static_cast<std::size_t>(group.first_row), e = static_cast<std::size_t>(group.end_row);
      std::size_t insert_at = b + 1;  // after the header at least
      for (std::size_t r = b + 1; r < e; ++r) {
        const RowKind k = old[r].kind;
        if (k == RowKind::kMemory || k == RowKind::kNvtx || k == RowKind::kApiCalls) break;
        insert_at = r + 1;
      }
      // Tracks of an earlier replay on `base` give way to these.
      auto copy = [&](std::size_t r) {
        if (!old[r].replayed()) rows.push_back(std::move(old[r]));
      };
      group.first_row = static_cast<int>(rows.size());
      for (std::size_t r = b; r < insert_at; ++r) copy(r);
      const std::size_t first_replayed = rows.size();
      if (options_.span_rows)
        for (auto level : {SpanLevel::kIteration, SpanLevel::kLayer}) {
          const auto order = detail::spans_of(m_.replayed_spans_, group.rank, level);
          if (order.empty()) continue;
          detail::add_packed_rows(m_, rows,
                                  {RowKind::kReplayed, group.rank, -1,
                                   prefix + (level == SpanLevel::kIteration ? "iterations" : "layers"), 16},
                                  ItemSource::kReplayedSpan, order, options_.max_sub_rows);
        }
      if (tracks_ok) {
        detail::StreamRows spec;
        spec.op_kind = spec.activity_kind = RowKind::kReplayed;
        spec.op_source = ItemSource::kReplayedOp;
        spec.activity_source = ItemSource::kReplayedActivity;
        spec.prefix = prefix;
        spec.op_rows = options_.op_rows;
        spec.max_sub_rows = options_.max_sub_rows;
        for (auto s : detail::rank_streams(t, group.rank)) detail::add_stream_rows(m_, rows, t, group.rank, s, spec);
      }
      for (std::size_t r = first_replayed; r < rows.size(); ++r) rows[r].group = static_cast<int>(g);
      for (std::size_t r = insert_at; r < e; ++r) copy(r);
      group.end_row = static_cast<int>(rows.size());
    }
    m_.rows_ = std::move(rows);
  }

  ReplayRowOptions options_;
  TimelineModel m_;
};

std::shared_ptr<const TimelineModel> TimelineModel::with_replay(const TimelineModel& base,
                                                                std::shared_ptr<const analyzer::Trace> replayed,
                                                                const ReplayRowOptions& options) {
  return ReplayRowsBuilder(base, std::move(replayed), options).build();
}

}  // namespace moetrace::gui
