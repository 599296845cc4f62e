// The Trace model's own operations: look-ups, track order (trace.h).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/gemm_shape.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/ascii.h"
#include "moetrace/schema/schema.h"

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

namespace {

bool call_before(const ApiCall& c, const Activity& a) {
  return std::tie(c.correlation_id, c.rank) < std::tie(a.correlation_id, a.rank);
}

// The launching call of `a` by binary search; -2: none. By (correlation id,
// rank): ranks number their calls alike, so one id has a call on each rank
// (a scan over them made a 1024-rank run quadratic). `hint`: where to start
// (a galloping search from it finds the same call, in few steps when it is
// near); it becomes the position searched to.
std::int32_t find_launching_call(const std::vector<ApiCall>& calls, const Activity& a, std::size_t& hint) {
  if (a.correlation_id == 0) return -2;
  // [lo, hi]: where the first call not before `a` is.
  const std::size_t n = calls.size();
  std::size_t lo = 0, hi = n;
  if (hint < n && call_before(calls[hint], a)) {
    lo = hint + 1;
    for (std::size_t step = 1;; step *= 2) {
      const std::size_t p = lo + step - 1;
      if (p >= n) break;
      if (!call_before(calls[p], a)) {
        hi = p;
        break;
      }
      lo = p + 1;
    }
  } else {
    hi = std::min(hint, n);
    for (std::size_t step = 1; hi > 0; step *= 2) {
      const std::size_t p = hi > step ? hi - step : 0;
      if (call_before(calls[p], a)) {
        lo = p + 1;
        break;
      }
      hi = p;
    }
  }
  const auto it = std::lower_bound(calls.begin() + static_cast<std::ptrdiff_t>(lo),
                                   calls.begin() + static_cast<std::ptrdiff_t>(hi), a, call_before);
  hint = static_cast<std::size_t>(it - calls.begin());
  return it != calls.end() && it->correlation_id == a.correlation_id && it->rank == a.rank
             ? static_cast<std::int32_t>(it - calls.begin())
             : -2;
}

std::int32_t find_launching_call(const std::vector<ApiCall>& calls, const Activity& a) {
  std::size_t hint = calls.size() / 2;
  return find_launching_call(calls, a, hint);
}

}  // namespace

const ApiCall* Trace::launching_call(const Activity& a) const {
  // The index looked up at load, where it still names the call (an activity
  // built by hand, or a copy from another trace, is searched for).
  if (a.launched_by == -2) return nullptr;
  const auto i = static_cast<std::size_t>(a.launched_by);
  if (a.launched_by >= 0 && i < api_calls.size() && api_calls[i].correlation_id == a.correlation_id &&
      api_calls[i].rank == a.rank)
    return &api_calls[i];
  const auto found = find_launching_call(api_calls, a);
  return found >= 0 ? &api_calls[static_cast<std::size_t>(found)] : nullptr;
}

void Trace::index_launching_calls() { index_launching_calls(0, activities.size()); }

void Trace::index_launching_calls(std::size_t begin, std::size_t end) {
  if (api_calls.size() > static_cast<std::size_t>(INT32_MAX)) return;  // searched for instead
  // A track's kernels mostly launch in correlation order: each search
  // starts where the previous one ended.
  std::size_t hint = 0;
  for (auto i = begin; i < end && i < activities.size(); ++i)
    activities[i].launched_by = find_launching_call(api_calls, activities[i], hint);
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

Category classify_activity(const Trace& trace, const Activity& a) {
  if (a.type != ActivityType::kKernel) return Category::kMemcpy;
  const auto id = static_cast<std::size_t>(a.name.value);
  if (a.name.valid() && id < trace.kernel_category.size() && trace.kernel_category[id] >= 0)
    return static_cast<Category>(trace.kernel_category[id]);
  return classify_kernel_name(trace.str(a.name));
}

std::string_view collective_kind(OpKind k) {
  switch (k) {
    case OpKind::kDispatchAllToAll:
    case OpKind::kCombineAllToAll:
    case OpKind::kRecommunicate: return "all_to_all";
    case OpKind::kMoeAllReduce:
    case OpKind::kTensorParallelAllReduce:
    case OpKind::kGradAllReduce: return "all_reduce";
    case OpKind::kTrans: return "broadcast";
    case OpKind::kAgg: return "reduce";
    case OpKind::kPipelineSend:
    case OpKind::kPipelineRecv: return "send_recv";
    default: return {};
  }
}

void Trace::sort_ops() {
  std::vector<std::int32_t> order(ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    return op_track_order(ops[static_cast<std::size_t>(x)], ops[static_cast<std::size_t>(y)]);
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
  std::sort(ops.begin(), ops.end(), op_track_order);
  op_index_.resize(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) op_index_[i] = {ops[i].id.value, static_cast<std::int32_t>(i)};
  std::sort(op_index_.begin(), op_index_.end());
  for (std::size_t i = 0; i < activities.size(); ++i)
    activities[i].op = activity_op_ids[i] >= 0 ? op_index(OpId(activity_op_ids[i])) : -1;
  op_track_begin = track_offsets(ops, streams.size());
}

// --- GEMMs from recorded input shapes (gemm_shape.h) ---------------------------

std::optional<GemmShape> gemm_shape(std::string_view op_name, std::string_view input_dims) {
  if (!schema::matrix_product_name(op_name)) return std::nullopt;
  const auto j = nlohmann::json::parse(input_dims, nullptr, false);
  if (!j.is_array()) return std::nullopt;
  // The inputs that are matrices (or batches of them), in order.
  std::vector<std::vector<std::int64_t>> m;
  for (const auto& in : j) {
    if (!in.is_array() || in.size() < 2) continue;
    std::vector<std::int64_t> dims;
    for (const auto& d : in) {
      if (!d.is_number_integer() || d.get<std::int64_t>() <= 0) {
        dims.clear();
        break;
      }
      dims.push_back(d.get<std::int64_t>());
    }
    if (!dims.empty()) m.push_back(std::move(dims));
  }
  if (m.size() < 2) return std::nullopt;
  auto rows = [](const std::vector<std::int64_t>& x) {
    std::int64_t r = 1;
    for (std::size_t i = 0; i + 1 < x.size(); ++i) r *= x[i];
    return r;
  };
  const std::string name = to_ascii_lower(op_name);
  if (name.find("linear") != std::string::npos) {
    // linear(x[..., K], weight[N, K], bias): y = x W^T.
    const auto& x = m[0];
    const auto& w = m[1];
    if (w.size() != 2 || x.back() != w[1]) return std::nullopt;
    return GemmShape{w[1], w[0], rows(x)};
  }
  // a[..., T, K] x b[..., K, N]: the first pair whose inner sizes agree
  // (addmm's bias is a vector, skipped above; baddbmm's input comes first).
  for (std::size_t i = 0; i + 1 < m.size(); ++i) {
    const auto& a = m[i];
    const auto& b = m[i + 1];
    if (a.back() == b[b.size() - 2]) return GemmShape{a.back(), b.back(), rows(a)};
  }
  return std::nullopt;
}

LaunchShapes::LaunchShapes(const Trace& trace) : t_(trace) {
  if (trace.input_shapes.empty()) return;
  for (std::size_t i = 0; i < trace.nvtx.size(); ++i) {
    const auto& r = trace.nvtx[i];
    if (r.input_shape >= 0) ranges_[{r.rank.value, r.thread_id}].push_back(i);
  }
  for (auto& [key, list] : ranges_)
    std::sort(list.begin(), list.end(),
              [&](std::size_t a, std::size_t b) { return trace.nvtx[a].start_ns < trace.nvtx[b].start_ns; });
}

std::optional<std::size_t> LaunchShapes::range_of(const Activity& a) const {
  if (ranges_.empty()) return std::nullopt;
  const ApiCall* call = t_.launching_call(a);
  if (!call) return std::nullopt;
  auto it = ranges_.find({call->rank.value, call->thread_id});
  if (it == ranges_.end()) return std::nullopt;
  const auto& list = it->second;
  // The latest start before the launch whose end is after it (a few levels
  // of nesting at most: aten::linear > aten::addmm).
  auto pos = std::upper_bound(list.begin(), list.end(), call->start_ns,
                              [&](std::int64_t t, std::size_t i) { return t < t_.nvtx[i].start_ns; });
  for (int back = 0; pos != list.begin() && back < 16; ++back) {
    --pos;
    const auto& r = t_.nvtx[*pos];
    if (r.end_ns < 0 || r.end_ns >= call->start_ns) return *pos;
  }
  return std::nullopt;
}

std::optional<GemmShape> LaunchShapes::gemm_of(std::size_t range) const {
  const auto& r = t_.nvtx[range];
  if (r.input_shape < 0) return std::nullopt;
  return gemm_shape(t_.str(r.name), t_.input_shapes[static_cast<std::size_t>(r.input_shape)].dims);
}

}  // namespace moetrace::analyzer
