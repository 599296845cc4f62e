// The timeline as data: which rows there are (a group per rank; in it the
// iteration / layer / chunk spans, then per stream its op ranges, its
// kernels and copies and its queue length, then the memory counter, then per CPU thread its NVTX
// ranges and runtime/driver API calls), which items each row holds
// (packed so that items of one row never overlap), and each row's
// level-of-detail pyramid. Built once per trace off the GUI thread and then
// only read, from any thread; the GUI never owns data (as Tracy's Worker).
//
// A model may also show the trace's replay (analyzer exec_graph.h: the trace
// replayed from its execution graph, or predicted after a what-if): the same
// stream tracks, and iteration and layer spans, of the replayed trace, under
// each rank's stream tracks (TimelineModel::with_replay). Their items are
// ItemSource::kReplayed*, indices into the replayed trace, on rows of kind
// RowKind::kReplayed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/counter_track.h"
#include "moetrace/gui/lod.h"
#include "moetrace/gui/palette.h"

namespace moetrace::gui {

// Where a row's items live.
// The kReplayed* sources index the replayed trace (and its spans), whose
// activities and ops are in an order of their own.
enum class ItemSource : std::uint8_t {
  kNone, kActivity, kOp, kSpan, kApiCall, kNvtx,
  kReplayedActivity, kReplayedOp, kReplayedSpan,
};
inline bool is_replayed(ItemSource s) {
  return s == ItemSource::kReplayedActivity || s == ItemSource::kReplayedOp || s == ItemSource::kReplayedSpan;
}
// kReplayedActivity -> kActivity, ...; the measured sources map to themselves.
ItemSource measured_source(ItemSource s);

enum class SpanLevel : std::uint8_t { kIteration, kLayer, kChunk };

// An iteration, a MoE layer pass or one of its chunks on one rank: the
// envelope of the op ranges that carry those coordinates.
struct Span {
  std::int64_t start_ns = 0, end_ns = 0;
  RankId rank;
  SpanLevel level = SpanLevel::kIteration;
  Phase phase = Phase::kOther;
  std::int32_t iteration = -1, layer = -1, micro_batch = -1, chunk = -1;
  std::uint32_t ops = 0;  // op ranges inside
};

enum class RowKind : std::uint8_t {
  kRankHeader, kIterations, kLayers, kChunks, kOps, kActivities, kMemory,
  kNvtx, kApiCalls,  // host side, per CPU thread
  // Per stream with kernels or copies: its queue length (QueueTracks). The
  // row is in the model from the start; its values come with the analyses,
  // and RowLayout shows it only once a stream has them.
  kQueue,
  // A track of the replayed trace (with_replay): its iteration or layer
  // spans, or one stream's op ranges or kernels; the row's source says which.
  kReplayed,
};

// The items of a row, as positions into the trace's arrays (or the model's
// spans), sorted by start. Activity rows of a stream whose kernels never
// overlap are the stream's contiguous track and store no index at all.
class RowItems {
 public:
  RowItems() = default;
  static RowItems contiguous(ItemSource s, std::uint32_t base, std::uint32_t count);
  static RowItems indexed(ItemSource s, std::vector<std::uint32_t> index);
  ItemSource source() const { return source_; }
  std::size_t size() const { return contiguous_ ? count_ : index_.size(); }
  bool empty() const { return size() == 0; }
  std::uint32_t operator[](std::size_t pos) const {
    return contiguous_ ? base_ + static_cast<std::uint32_t>(pos) : index_[pos];
  }
  std::size_t memory_bytes() const { return index_.capacity() * sizeof(std::uint32_t); }

 private:
  ItemSource source_ = ItemSource::kNone;
  bool contiguous_ = true;
  std::uint32_t base_ = 0, count_ = 0;
  std::vector<std::uint32_t> index_;
};

struct Row {
  RowKind kind = RowKind::kActivities;
  RankId rank;
  std::int32_t stream = -1;   // index into Trace::streams
  std::int64_t thread = -1;   // kNvtx, kApiCalls: the CPU thread
  int sub_row = 0;            // packing depth within its (stream, kind)
  int group = 0;              // index into TimelineModel::groups
  int height_px = 18;
  std::string label;          // empty on sub-rows after the first
  RowItems items;
  bool monotone = true;       // items do not overlap (false only on an overflow row)
  std::int64_t max_extent = 0;
  LodPyramid lod;
  std::int32_t counter = -1;  // kMemory: index into TimelineModel::counters
  bool is_counter() const { return kind == RowKind::kMemory || kind == RowKind::kQueue; }
  bool replayed() const { return kind == RowKind::kReplayed; }
};

struct RankGroup {
  RankId rank;
  std::string label;
  int first_row = 0, end_row = 0;  // [first, end) in rows; first is the header
};

// An item on the timeline.
struct ItemRef {
  ItemSource source = ItemSource::kNone;
  std::uint32_t index = 0;
  bool valid() const { return source != ItemSource::kNone; }
  friend bool operator==(const ItemRef&, const ItemRef&) = default;
};

struct BuildOptions {
  bool span_rows = true;
  bool op_rows = true;
  bool memory_rows = true;
  bool queue_rows = true;     // a kQueue row under each stream's kernels
  bool host_rows = true;      // NVTX ranges and API calls per CPU thread
  int max_sub_rows = 16;      // deeper nesting shares the last sub-row
  unsigned threads = 0;       // for the pyramids; 0: hardware concurrency
  std::function<void(std::string_view stage, double fraction)> progress;
};

// The tracks with_replay adds under each rank's stream tracks.
struct ReplayRowOptions {
  // Leads every label: "replayed" (the execution graph with the measured
  // durations) or "predicted" (after a what-if).
  std::string prefix = "replayed";
  bool span_rows = true;   // the replayed iterations and MoE layers
  bool op_rows = true;     // per stream, its op ranges
  int max_sub_rows = 16;
  unsigned threads = 0;    // for the pyramids; 0: hardware concurrency
};

class TimelineModel {
 public:
  static std::shared_ptr<const TimelineModel> build(std::shared_ptr<const analyzer::Trace> trace,
                                                    const BuildOptions& options = {});
  // `base` with the tracks of `replayed` (a copy of base's trace at other
  // times: analyzer::replayed_trace) added under each rank's stream tracks:
  // a row of its iterations and of its layers, then per stream of the rank
  // (in base's order) its op ranges and its kernels or copies. base's own
  // rows, items and spans are unchanged, so its ItemRefs stay valid. Throws
  // std::invalid_argument where `replayed` has other streams than base's trace.
  static std::shared_ptr<const TimelineModel> with_replay(const TimelineModel& base,
                                                          std::shared_ptr<const analyzer::Trace> replayed,
                                                          const ReplayRowOptions& options = {});

  const analyzer::Trace& trace() const { return *trace_; }
  const std::shared_ptr<const analyzer::Trace>& trace_ptr() const { return trace_; }
  std::span<const Row> rows() const { return rows_; }
  std::span<const RankGroup> groups() const { return groups_; }
  std::span<const Span> spans() const { return spans_; }
  std::span<const CounterTrack> counters() const { return counters_; }
  // The replayed trace shown (with_replay), or null.
  const analyzer::Trace* replayed_trace() const { return replayed_.get(); }
  std::span<const Span> replayed_spans() const { return replayed_spans_; }
  const std::string& replay_label() const { return replay_label_; }
  // The trace an item indexes: the replayed one for the kReplayed* sources.
  const analyzer::Trace& trace_of(ItemRef r) const { return is_replayed(r.source) && replayed_ ? *replayed_ : *trace_; }
  // The span of a kSpan or kReplayedSpan item.
  const Span& span(ItemRef r) const { return r.source == ItemSource::kReplayedSpan ? replayed_spans_[r.index] : spans_[r.index]; }
  // Extent of everything drawn; end > start always.
  std::int64_t start_ns() const { return start_ns_; }
  std::int64_t end_ns() const { return end_ns_; }

  // Where an item lies: (start, end) in ns.
  std::pair<std::int64_t, std::int64_t> item_extent(ItemRef r) const;
  std::int64_t item_start(ItemRef r) const { return item_extent(r).first; }
  std::int64_t item_end(ItemRef r) const { return item_extent(r).second; }
  ColourClass item_colour(ItemRef r) const;
  // Short label drawn inside a block: kernel name, op kind and chunk, "L3 fwd".
  std::string item_label(ItemRef r) const;
  // Name matched by search: kernel or op name, op kind, "memcpy HtoD".
  std::string item_name(ItemRef r) const;

  ItemRef row_item(const Row& row, std::size_t pos) const { return {row.items.source(), row.items[pos]}; }
  // The item of `row` under time t, or the nearest within tolerance_ns.
  std::optional<std::size_t> hit_test(int row, double t_ns, double tolerance_ns) const;
  // The row showing an item and its position in it.
  struct Place {
    int row = -1;
    std::size_t pos = 0;
  };
  std::optional<Place> place_of(ItemRef r) const;
  // Positions [first, last) of a row's items intersecting [t0, t1].
  std::pair<std::size_t, std::size_t> visible_range(const Row& row, double t0, double t1) const;

  // Whether an op has GPU activities attributed to it (else its own range counts).
  bool op_has_activity(std::size_t op) const { return op < op_has_activity_.size() && op_has_activity_[op]; }
  std::size_t memory_bytes() const;

 private:
  TimelineModel() = default;
  std::shared_ptr<const analyzer::Trace> trace_;
  std::vector<Row> rows_;
  std::vector<RankGroup> groups_;
  std::vector<Span> spans_;
  std::vector<CounterTrack> counters_;
  std::vector<bool> op_has_activity_;
  std::vector<ColourClass> activity_colour_;
  std::int64_t start_ns_ = 0, end_ns_ = 1;
  // with_replay: the replayed trace, its spans and its activities' colours.
  std::shared_ptr<const analyzer::Trace> replayed_;
  std::vector<Span> replayed_spans_;
  std::vector<ColourClass> replayed_activity_colour_;
  std::string replay_label_;
  friend class TimelineModelBuilder;
  friend class ReplayRowsBuilder;
};

// Vertical placement of rows given which rank groups are collapsed (a
// collapsed group shows its header only). A kQueue row shows only where
// `queues` (null: none yet, or hidden) has its stream's track.
class RowLayout {
 public:
  static constexpr int kHeaderHeight = 22;
  static RowLayout compute(const TimelineModel& model, const std::vector<bool>& collapsed = {},
                           const QueueTracks* queues = nullptr);
  int y(int row) const { return y_[static_cast<std::size_t>(row)]; }   // -1: hidden
  int height(int row) const { return h_[static_cast<std::size_t>(row)]; }
  bool visible(int row) const { return y_[static_cast<std::size_t>(row)] >= 0; }
  int total_height() const { return total_; }
  // The visible row at y, or -1.
  int row_at(int y) const;
  // Visible rows intersecting [y0, y1), in order.
  std::vector<int> rows_in(int y0, int y1) const;
  std::size_t size() const { return y_.size(); }

 private:
  std::vector<int> y_, h_;
  std::vector<int> order_;  // visible rows, by y
  int total_ = 0;
};

}  // namespace moetrace::gui
