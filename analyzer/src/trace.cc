// The Trace model's own operations: look-ups, track order (trace.h).
#include <algorithm>
#include <charconv>
#include <set>

#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

int Trace::stream_index(StreamId id) const {
  auto it = std::lower_bound(stream_index_.begin(), stream_index_.end(),
                             std::pair{id.value, INT32_MIN});
  if (it == stream_index_.end() || it->first != id.value) return -1;
  return it->second;
}

int Trace::op_index(OpId id) const {
  auto it = std::lower_bound(op_index_.begin(), op_index_.end(), std::pair{id.value, INT32_MIN});
  if (it == op_index_.end() || it->first != id.value) return -1;
  return it->second;
}

const ApiCall* Trace::api_call(std::int64_t correlation_id) const {
  auto it = std::lower_bound(
      api_calls.begin(), api_calls.end(), correlation_id,
      [](const ApiCall& a, std::int64_t v) { return a.correlation_id < v; });
  return it != api_calls.end() && it->correlation_id == correlation_id ? &*it : nullptr;
}

const ApiCall* Trace::launching_call(const Activity& a) const {
  if (a.correlation_id == 0) return nullptr;
  for (auto it = std::lower_bound(api_calls.begin(), api_calls.end(), a.correlation_id,
                                  [](const ApiCall& c, std::int64_t v) { return c.correlation_id < v; });
       it != api_calls.end() && it->correlation_id == a.correlation_id; ++it)
    if (it->rank == a.rank) return &*it;
  return nullptr;
}

std::int64_t Trace::event_count() const {
  return static_cast<std::int64_t>(activities.size() + ops.size() + api_calls.size() + nvtx.size() +
                                   memory_events.size());
}

std::vector<RankId> Trace::rank_ids() const {
  std::set<RankId> ids;
  for (const auto& r : ranks) ids.insert(r.rank);
  for (const auto& s : streams) ids.insert(s.rank);
  return {ids.begin(), ids.end()};
}

std::string_view Trace::config_value(std::string_view key) const {
  for (const auto& [k, v] : run.config)
    if (k == key) return v;
  for (const auto& [k, v] : run.config)
    if (k.size() > key.size() && k.ends_with(key) && k[k.size() - key.size() - 1] == '.') return v;
  return {};
}

std::optional<std::int64_t> Trace::config_int(std::string_view key) const {
  const auto s = config_value(key);
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

void Trace::classify_kernel_names() {
  kernel_category.assign(strings.size(), -1);
  for (const auto& a : activities) {
    if (a.type != ActivityType::kKernel || !a.name.valid()) continue;
    const auto id = static_cast<std::size_t>(a.name.value);
    if (id < kernel_category.size() && kernel_category[id] < 0)
      kernel_category[id] = static_cast<std::int8_t>(classify_kernel_name(strings[id]));
  }
}

void Trace::sort_ops() {
  std::vector<std::int32_t> order(ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    const auto& a = ops[static_cast<std::size_t>(x)];
    const auto& b = ops[static_cast<std::size_t>(y)];
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::vector<std::int32_t> new_index(ops.size());
  std::vector<OpRange> sorted;
  sorted.reserve(ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    new_index[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
    sorted.push_back(ops[static_cast<std::size_t>(order[i])]);
  }
  ops = std::move(sorted);
  for (auto& a : activities)
    if (a.op >= 0) a.op = new_index[static_cast<std::size_t>(a.op)];
  for (auto& [id, index] : op_index_) index = new_index[static_cast<std::size_t>(index)];
}

void Trace::index_ops() {
  std::vector<std::int64_t> activity_op_ids(activities.size(), -1);
  for (std::size_t i = 0; i < activities.size(); ++i)
    if (activities[i].op >= 0) activity_op_ids[i] = ops[static_cast<std::size_t>(activities[i].op)].id.value;
  std::sort(ops.begin(), ops.end(), [](const OpRange& a, const OpRange& b) {
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  op_index_.resize(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) op_index_[i] = {ops[i].id.value, static_cast<std::int32_t>(i)};
  std::sort(op_index_.begin(), op_index_.end());
  for (std::size_t i = 0; i < activities.size(); ++i)
    activities[i].op = activity_op_ids[i] >= 0 ? op_index(OpId(activity_op_ids[i])) : -1;
  op_track_begin.assign(streams.size() + 1, 0);
  for (const auto& op : ops) ++op_track_begin[static_cast<std::size_t>(op.stream) + 1];
  for (std::size_t i = 0; i < streams.size(); ++i) op_track_begin[i + 1] += op_track_begin[i];
}

}  // namespace moetrace::analyzer
