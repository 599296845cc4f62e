#include "moetrace/analyzer/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/interval.h"
#include "moetrace/analyzer/stats.h"
#include "moetrace/schema/error.h"
#include "op_intervals.h"

namespace moetrace::analyzer {

LinearFit fit_linear(std::span<const double> x, std::span<const double> t) {
  LinearFit f;
  const std::size_t n = std::min(x.size(), t.size());
  f.points = static_cast<int>(n);
  if (n == 0) return f;
  double sx = 0, st = 0;
  f.x_min = f.x_max = x[0];
  for (std::size_t i = 0; i < n; ++i) {
    sx += x[i];
    st += t[i];
    f.x_min = std::min(f.x_min, x[i]);
    f.x_max = std::max(f.x_max, x[i]);
  }
  const double mx = sx / static_cast<double>(n), mt = st / static_cast<double>(n);
  f.mean_time = mt;
  double sxx = 0, sxt = 0, stt = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxt += (x[i] - mx) * (t[i] - mt);
    stt += (t[i] - mt) * (t[i] - mt);
  }
  if (f.x_max > f.x_min && sxx > 0) {
    f.method = "least_squares";
    f.beta = sxt / sxx;
    f.alpha = mt - f.beta * mx;
  } else if (mx != 0) {
    // One size only: alpha and beta are not separable; a pure rate model.
    f.method = "mean_rate";
    f.alpha = 0;
    f.beta = mt / mx;
  } else {
    f.method = "mean_rate";
    f.alpha = mt;
    f.beta = 0;
  }
  double ss_res = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = t[i] - f.predict(x[i]);
    ss_res += r * r;
  }
  f.residual_rms = std::sqrt(ss_res / static_cast<double>(n));
  // Relative tolerance: an exact line leaves rounding noise in SS_res.
  const double tiny = 1e-24 * std::max(1.0, st * st);
  if (stt > tiny) f.r2 = 1.0 - ss_res / stt;
  else f.r2 = ss_res <= tiny ? 1.0 : 0.0;
  return f;
}

int sim_launches(OpKind kind, Phase phase) {
  switch (kind) {
    case OpKind::kExpertFfn: return phase == Phase::kBackward ? 4 : 2;
    case OpKind::kRecompute: return 1;
    case OpKind::kGate: return phase == Phase::kBackward ? 2 : 1;
    default: return 1;
  }
}

const CostModelFit* CostModel::find_compute(std::string_view op_kind) const {
  for (const auto& f : compute)
    if (f.kind == op_kind) return &f;
  return nullptr;
}

const CostModelFit* CostModel::find_collective(std::string_view kind, int group_size) const {
  for (const auto& f : collectives)
    if (f.kind == kind && f.group_size == group_size) return &f;
  return nullptr;
}

const InterferenceFactor* CostModel::find_factor(std::string_view factor, std::string_view interferer) const {
  for (const auto& f : interference)
    if (f.factor == factor && f.interferer == interferer) return &f;
  return nullptr;
}

namespace {

enum Class { kComp = 0, kComm = 1, kMem = 2, kNoClass = 3 };
constexpr const char* kClassNames[] = {"comp", "comm", "mem", "all"};
constexpr const char* kFactorNames[] = {"sigma", "mu", "eta"};
constexpr double kLoneTolerance = 0.01;  // overlap below 1 % of an op counts as none
constexpr double kOverlapped = 0.5;      // overlap of at least half of it counts as overlapped

Class class_of(Category c) {
  if (is_computation(c)) return kComp;
  if (is_communication(c)) return kComm;
  if (c == Category::kMemcpy) return kMem;
  return kNoClass;
}

// The place of an (instance, rank) pair in a sorted list that holds it.
std::int32_t instance_place(const std::vector<std::pair<CostSamples::InstanceKey, std::int32_t>>& list,
                            const std::pair<CostSamples::InstanceKey, std::int32_t>& pair) {
  return static_cast<std::int32_t>(std::lower_bound(list.begin(), list.end(), pair) - list.begin());
}

struct Group;

// What fitting adds to a CostSamples::Op (the same index).
struct OpFit {
  const Group* group = nullptr;  // the fit group it belongs to
  double launches = 1;           // the simulator's GEMM count (compute)
};

struct Group {
  std::vector<double> x, t, l, lone_x, lone_t, lone_l;  // l: simulator launches
  std::set<std::string, std::less<>> kinds;
};

// t = a L + b x without intercept (the simulator's compute form).
LaunchFit fit_launches(const std::vector<double>& l, const std::vector<double>& x, const std::vector<double>& t) {
  LaunchFit f;
  if (x.empty()) return f;
  f.usable = true;
  if (std::all_of(l.begin(), l.end(), [&](double v) { return v == l.front(); })) {
    const auto lf = fit_linear(x, t);
    f.alpha_per_launch = lf.alpha / l.front();
    f.beta = lf.beta;
    return f;
  }
  double sll = 0, slx = 0, sxx = 0, slt = 0, sxt = 0, st = 0, sx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sll += l[i] * l[i];
    slx += l[i] * x[i];
    sxx += x[i] * x[i];
    slt += l[i] * t[i];
    sxt += x[i] * t[i];
    st += t[i];
    sx += x[i];
  }
  const double det = sll * sxx - slx * slx;
  if (std::fabs(det) > 1e-12 * sll * sxx) {
    f.alpha_per_launch = (slt * sxx - sxt * slx) / det;
    f.beta = (sll * sxt - slx * slt) / det;
  } else {
    f.alpha_per_launch = 0;
    f.beta = sx > 0 ? st / sx : 0;
  }
  return f;
}

CostModelFit make_fit(std::string subject, std::string kind, int group_size, std::string x, Group& g) {
  CostModelFit f;
  f.subject = std::move(subject);
  f.kind = std::move(kind);
  f.group_size = group_size;
  f.x = std::move(x);
  f.op_kinds.assign(g.kinds.begin(), g.kinds.end());
  std::set<double> lone_sizes(g.lone_x.begin(), g.lone_x.end());
  if (g.lone_x.size() >= 3 && lone_sizes.size() >= 2) {
    f.sample = "lone";
    f.fit = fit_linear(g.lone_x, g.lone_t);
    if (f.subject == "compute") f.launch_fit = fit_launches(g.lone_l, g.lone_x, g.lone_t);
  } else {
    f.sample = "all";
    f.fit = fit_linear(g.x, g.t);
    if (f.subject == "compute") f.launch_fit = fit_launches(g.l, g.x, g.t);
  }
  return f;
}

// HostIssueFit (cost_model.h): per op kind, the median host time of each
// GEMM-launch count, then a line through those medians.
std::vector<HostIssueFit> fit_host_issue(const std::vector<CostSamples::HostSample>& host, bool recognised) {
  std::map<OpKind, std::map<int, std::vector<double>>> by_kind;  // kind -> launches -> seconds
  for (const auto& h : host) by_kind[h.kind][recognised ? 1 : sim_launches(h.kind, h.phase)].push_back(h.seconds);
  std::vector<HostIssueFit> out;
  for (auto& [kind, by_launches] : by_kind) {
    HostIssueFit f;
    f.kind = std::string(op_kind_name(kind));
    std::vector<double> all, l, med;
    for (auto& [launches, t] : by_launches) {
      all.insert(all.end(), t.begin(), t.end());
      l.push_back(launches);
      med.push_back(median(t));
    }
    f.points = static_cast<int>(all.size());
    f.median = median(all);
    const LinearFit line = l.size() >= 2 ? fit_linear(l, med) : LinearFit{};
    if (line.method == "least_squares" && line.alpha >= 0 && line.beta >= 0) {
      f.method = "medians_line";
      f.alpha = line.alpha;
      f.per_launch = line.beta;
    } else {
      // One launch count (or a line that would go negative): the median, per op.
      f.method = "median";
      f.alpha = f.median;
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace

CostModel fit_cost_model(const Trace& trace) { return fit_cost_samples(cost_samples(trace), trace); }

CostSamples cost_samples(const Trace& trace) {
  CostSamples out;
  const auto& ops = trace.ops;

  // An op's intervals merged (overlaps joined), computed when read from the
  // ops' intervals (rows of the trace, 4 bytes an interval: less than a
  // merged copy of every op's, 16): valid until the next call.
  const OpIntervals oi(trace);
  std::vector<Interval> merged;
  auto op_union = [&](std::size_t o) {
    merged.clear();
    for (const auto i : oi.of(o)) {
      if (i.end <= i.start) continue;
      if (!merged.empty() && i.start <= merged.back().end) merged.back().end = std::max(merged.back().end, i.end);
      else merged.push_back(i);
    }
    return std::span<const Interval>(merged);
  };

  // One collective instance = same kind, layer, iteration, micro-batch,
  // chunk and phase. Several calls with the same coordinates (a layer's
  // gradient all-reduces of its attention and its dense weights) are told
  // apart by their order on the rank: the k-th of them on every rank is one
  // instance.
  using InstanceKey = CostSamples::InstanceKey;
  auto pack = [](std::int32_t hi, std::int32_t lo) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(hi)) << 32) | static_cast<std::uint32_t>(lo);
  };
  auto coords_of = [&](const OpRange& op) {
    return InstanceKey{pack(op.layer, op.iteration), pack(op.micro_batch, op.chunk),
                       pack(static_cast<std::int32_t>(op.kind), static_cast<std::int32_t>(op.phase)), 0};
  };
  // Each collective op's key and (instance, rank) place, from one array of
  // its (rank, coordinates, start, op), sorted twice by values it holds: by
  // rank, coordinates and start to number the calls of one coordinates on a
  // rank, then by (instance, rank) for the places (op indices sorted by
  // comparisons that read the ops, and a binary search per op, took up to
  // 0.9 s of a 10 M-event trace's fits).
  struct CollectiveOp {
    std::int32_t rank;
    std::uint32_t op;
    InstanceKey key;
    std::int64_t start;
  };
  std::vector<std::int32_t> place(ops.size(), -1);  // op -> its (instance, rank) place; -1: not a collective
  {
    // Counted first: room for them at once (grown op by op, the array was
    // copied at each doubling, old and new side by side: 60 MiB more at the
    // fits' highest point on a 10 M-event trace).
    std::vector<CollectiveOp> coll;
    coll.reserve(static_cast<std::size_t>(
        std::count_if(ops.begin(), ops.end(), [](const OpRange& op) { return !collective_kind(op.kind).empty(); })));
    for (std::size_t o = 0; o < ops.size(); ++o) {
      const auto& op = ops[o];
      const auto ck = collective_kind(op.kind);
      if (ck.empty()) continue;
      coll.push_back({op.rank.value, static_cast<std::uint32_t>(o), coords_of(op), op.start_ns});
      if (ck == "all_to_all" && op.bytes > 0) {
        out.any_all_to_all = true;
        out.recv_known = out.recv_known && op.recv_bytes >= 0;
      }
    }
    std::sort(coll.begin(), coll.end(), [](const CollectiveOp& x, const CollectiveOp& y) {
      return std::tie(x.rank, x.key, x.start, x.op) < std::tie(y.rank, y.key, y.start, y.op);
    });
    for (std::size_t i = 1; i < coll.size(); ++i) {
      auto &p = coll[i - 1], &q = coll[i];
      if (p.rank == q.rank && std::tie(p.key.a, p.key.b, p.key.c) == std::tie(q.key.a, q.key.b, q.key.c))
        q.key.order = p.key.order + 1;
    }
    std::sort(coll.begin(), coll.end(), [](const CollectiveOp& x, const CollectiveOp& y) {
      return std::tie(x.key, x.rank) < std::tie(y.key, y.rank);
    });
    out.instance_ranks.reserve(coll.size());
    for (const auto& c : coll) {
      if (out.instance_ranks.empty() || out.instance_ranks.back() != std::pair(c.key, c.rank))
        out.instance_ranks.push_back({c.key, c.rank});
      place[c.op] = static_cast<std::int32_t>(out.instance_ranks.size() - 1);
    }
    out.instance_ranks.shrink_to_fit();
  }

  // At most one sample an op: room for them at once, not grown by copies.
  out.host.reserve(ops.size());
  out.ops.reserve(ops.size());
  for (const auto& op : ops)
    if (op.launch_start_ns >= 0 && op.launch_end_ns >= op.launch_start_ns)
      out.host.push_back({op.kind, op.phase, static_cast<double>(op.launch_end_ns - op.launch_start_ns) * 1e-9});

  // Bytes of the copies attributed to each op (copy ops without op bytes).
  std::vector<double> copy_bytes(ops.size(), 0.0);
  for (const auto& a : trace.activities)
    if (a.op >= 0 && a.type != ActivityType::kKernel) copy_bytes[static_cast<std::size_t>(a.op)] += static_cast<double>(a.bytes);

  // One rank at a time (the ops and activities come in rank order, so the
  // samples keep the trace's order): the rank's intervals of each class,
  // as a set and where two or more of them run at once, then its ops'
  // samples against them. Every rank's sets at once held 32 bytes an
  // interval of the trace, and more while their arrays grew.
  const RankRows ranks(trace);
  for (std::size_t slot = 0; slot < ranks.size(); ++slot) {
    std::array<IntervalSet, 3> any, two;
    {
      std::array<std::vector<Interval>, 3> of_class;
      for (const auto o : ranks.ops(slot)) {
        const auto c = class_of(op_category(ops[o].kind));
        if (c == kNoClass) continue;
        const auto u = op_union(o);
        auto& v = of_class[static_cast<std::size_t>(c)];
        v.insert(v.end(), u.begin(), u.end());
      }
      // Unattributed GPU work interferes too.
      for (const auto i : ranks.activities(slot)) {
        const auto& a = trace.activities[i];
        if (a.op >= 0) continue;
        const auto c = class_of(classify_activity(trace, a));
        if (c != kNoClass && a.end_ns > a.start_ns) of_class[static_cast<std::size_t>(c)].push_back({a.start_ns, a.end_ns});
      }
      for (int c = 0; c < 3; ++c) {
        two[static_cast<std::size_t>(c)] = IntervalSet::depth_at_least(of_class[static_cast<std::size_t>(c)], 2);
        any[static_cast<std::size_t>(c)] = IntervalSet::from(std::move(of_class[static_cast<std::size_t>(c)]));
      }
    }
    for (const auto o : ranks.ops(slot)) {
      const auto& op = ops[o];
      const auto c = class_of(op_category(op.kind));
      if (c == kNoClass) continue;
      // Work: FLOPs of computation (bytes for memory-bound kernels without
      // FLOPs), bytes of communication and copies.
      const bool by_bytes = c != kComp || !(op.flops > 0);
      double work = by_bytes ? static_cast<double>(op.bytes) : op.flops;
      if (c == kMem && work <= 0) work = copy_bytes[o];
      std::int64_t busy = 0;
      const auto u = op_union(o);
      for (const auto& i : u) busy += i.length();
      if (busy <= 0) continue;
      // Overlap with each class, the op itself excluded (same class: depth 2).
      std::array<std::int64_t, 3> ov{};
      for (int x = 0; x < 3; ++x) {
        const auto& set = x == c ? two[static_cast<std::size_t>(x)] : any[static_cast<std::size_t>(x)];
        for (const auto& i : u) ov[static_cast<std::size_t>(x)] += set.length_within(i);
      }
      const double b = static_cast<double>(busy);
      auto frac = [&](int x) { return static_cast<double>(ov[static_cast<std::size_t>(x)]) / b; };
      CostSamples::Op s;
      s.kind = op.kind;
      s.phase = op.phase;
      s.cls = static_cast<std::int8_t>(c);
      s.by_bytes = by_bytes;
      s.work = work;
      s.seconds = b * 1e-9;
      s.recv_bytes = static_cast<double>(op.recv_bytes);
      for (int x = 0; x < 3; ++x) s.lone = s.lone && frac(x) <= kLoneTolerance;
      for (int x = 0; x < 3; ++x) {
        if (frac(x) < kOverlapped) continue;
        bool clean = true;
        for (int y = 0; y < 3; ++y)
          if (y != x && frac(y) > kLoneTolerance) clean = false;
        if (clean) s.overlapped_by = static_cast<std::int8_t>(x);
      }
      {
        int others = 0;
        for (int y = 0; y < 3; ++y)
          if (y != c && frac(y) >= kOverlapped) ++others;
        if (others == 2) s.overlapped_by = 3;
      }
      s.instance = place[o];
      out.ops.push_back(s);
    }
  }
  return out;
}

CostSamples merge_cost_samples(std::vector<CostSamples> parts) {
  CostSamples out;
  for (const auto& p : parts)
    out.instance_ranks.insert(out.instance_ranks.end(), p.instance_ranks.begin(), p.instance_ranks.end());
  std::sort(out.instance_ranks.begin(), out.instance_ranks.end());
  out.instance_ranks.erase(std::unique(out.instance_ranks.begin(), out.instance_ranks.end()), out.instance_ranks.end());
  for (auto& p : parts) {
    // Each op's (instance, rank) place, from its part's list to the joined one.
    for (auto op : p.ops) {
      if (op.instance >= 0)
        op.instance = instance_place(out.instance_ranks, p.instance_ranks[static_cast<std::size_t>(op.instance)]);
      out.ops.push_back(op);
    }
    out.host.insert(out.host.end(), p.host.begin(), p.host.end());
    out.any_all_to_all = out.any_all_to_all || p.any_all_to_all;
    out.recv_known = out.recv_known && p.recv_known;
    p = CostSamples();
  }
  return out;
}

CostModel fit_cost_samples(const CostSamples& in, const Trace& run) {
  CostModel model;
  const auto tensor_parallel = run.config_int("tensor_parallel").value_or(0);
  // All-to-alls by the bytes sent, or, where every one records what it
  // receives too, by the rule that fits best (chosen below).
  const bool recv_known = in.any_all_to_all && in.recv_known;
  // Each (instance, rank) pair's instance (a slot: the distinct keys in
  // order), and each instance's participants (its pairs: sorted, each once).
  const auto& instance_ranks = in.instance_ranks;
  std::vector<std::int32_t> slot_of(instance_ranks.size());
  std::vector<int> participants;
  for (std::size_t i = 0; i < instance_ranks.size(); ++i) {
    if (i == 0 || instance_ranks[i].first != instance_ranks[i - 1].first) participants.push_back(0);
    ++participants.back();
    slot_of[i] = static_cast<std::int32_t>(participants.size() - 1);
  }

  std::vector<OpFit> op_fits(in.ops.size());
  std::map<std::pair<std::string, std::string>, Group> compute;  // (op kind, x)
  // A collective instance: its participants' ops. The busiest participant
  // sets its time (pro-prophet Eq. 1), and every participant but the last
  // to arrive also waits for the others, so a point is (the largest bytes
  // any participant sends, the shortest participant's time).
  struct Instance {
    Group* group = nullptr;
    std::string_view kind;
    double max_bytes = 0;
    double max_recv = 0;  // all-to-all: the most bytes one participant receives
    double min_seconds = INFINITY;
    bool lone = true;
    bool all_to_all = false;  // x by the all-to-all volume rule
  };
  std::vector<Instance> instances(participants.size());  // by slot
  std::map<std::string, Group> copies;
  std::map<std::pair<std::string, int>, Group> collectives;
  // The group of an op kind (and x: flops or bytes), looked up once a kind.
  constexpr std::size_t kKinds = std::numeric_limits<std::underlying_type_t<OpKind>>::max() + 1;
  std::array<std::array<Group*, 2>, kKinds> group_of{};
  for (std::size_t o = 0; o < in.ops.size(); ++o) {
    const auto& op = in.ops[o];
    const auto c = static_cast<Class>(op.cls);
    const double work = op.work;
    if (work <= 0) continue;

    const auto kind = op_kind_name(op.kind);
    Group* g = nullptr;
    if (c == kComp || c == kMem) {
      auto& cached = group_of[static_cast<std::size_t>(op.kind)][op.by_bytes ? 1 : 0];
      if (!cached) cached = c == kComp ? &compute[{std::string(kind), op.by_bytes ? "bytes" : "flops"}] : &copies[std::string(kind)];
      g = cached;
    } else if (auto ck = collective_kind(op.kind); !ck.empty()) {
      const auto slot = static_cast<std::size_t>(slot_of[static_cast<std::size_t>(op.instance)]);
      int group = participants[slot];
      if ((op.kind == OpKind::kMoeAllReduce || op.kind == OpKind::kTensorParallelAllReduce) && tensor_parallel > 0)
        group = static_cast<int>(tensor_parallel);
      if (ck == "send_recv") group = 2;
      // One point per collective instance, gathered below.
      auto& inst = instances[slot];
      inst.group = &collectives[{std::string(ck), group}];
      op_fits[o].group = inst.group;
      inst.kind = kind;
      inst.all_to_all = ck == "all_to_all";
      inst.max_bytes = std::max(inst.max_bytes, work);
      inst.max_recv = std::max(inst.max_recv, op.recv_bytes);
      inst.min_seconds = std::min(inst.min_seconds, op.seconds);
      inst.lone = inst.lone && op.lone;
      continue;
    }
    if (!g) continue;
    if (!g->kinds.contains(kind)) g->kinds.emplace(kind);
    // GEMM launches per op: the simulator's count for an op range of its own;
    // one for an op recognised from one kernel of an imported trace.
    const double launches = run.recognition.moe ? 1 : sim_launches(op.kind, op.phase);
    op_fits[o] = {g, launches};
    g->x.push_back(work);
    g->t.push_back(op.seconds);
    g->l.push_back(launches);
    if (op.lone) {
      g->lone_x.push_back(work);
      g->lone_t.push_back(op.seconds);
      g->lone_l.push_back(launches);
    }
  }
  // An instance's x under an all-to-all volume rule (cost_model.h).
  auto volume = [](const Instance& inst, std::string_view rule) {
    if (rule == "max_recv") return inst.max_recv;
    if (rule == "max_send_recv") return std::max(inst.max_bytes, inst.max_recv);
    return inst.max_bytes;
  };
  auto fill = [&](std::string_view a2a_rule) {
    for (auto& [key, g] : collectives) g = Group{};
    for (auto& inst : instances) {
      if (!inst.group) continue;
      auto& g = *inst.group;
      const double x = inst.all_to_all ? volume(inst, a2a_rule) : inst.max_bytes;
      g.kinds.emplace(inst.kind);
      g.x.push_back(x);
      g.t.push_back(inst.min_seconds);
      g.l.push_back(1);
      if (inst.lone) {
        g.lone_x.push_back(x);
        g.lone_t.push_back(inst.min_seconds);
        g.lone_l.push_back(1);
      }
    }
  };
  // Where every all-to-all records what it receives: the volume rule whose
  // fit at the largest all-to-all group (the expert-parallel one) has the
  // highest R^2; a tie keeps the simpler rule (sent before received before
  // both).
  model.all_to_all_volume = "max_send";
  if (recv_known) {
    double best = -INFINITY;
    for (const char* rule : {"max_send", "max_recv", "max_send_recv"}) {
      fill(rule);
      const Group* widest = nullptr;
      int size = 0;
      for (auto& [key, g] : collectives)
        if (key.first == "all_to_all" && key.second > size) {
          size = key.second;
          widest = &g;
        }
      if (!widest) break;
      Group copy = *widest;
      const double r2 = make_fit("collective", "all_to_all", size, "bytes", copy).fit.r2;
      if (r2 > best + 1e-9) {
        best = r2;
        model.all_to_all_volume = rule;
      }
    }
  }
  fill(model.all_to_all_volume);
  std::map<const Group*, CostModelFit> fit_of;
  for (auto& [key, g] : compute) model.compute.push_back(fit_of[&g] = make_fit("compute", key.first, 1, key.second, g));
  for (auto& [key, g] : collectives)
    model.collectives.push_back(fit_of[&g] = make_fit("collective", key.first, key.second, "bytes", g));
  for (auto& [kind, g] : copies) model.copies.push_back(fit_of[&g] = make_fit("copy", kind, 1, "bytes", g));
  // What an overlapped op would have taken alone, by its group's fit of lone
  // ops where there is one (startups included, so ops of another size than
  // the lone ones compare fairly); < 0: none.
  auto alone_seconds = [&](std::size_t o) {
    const OpFit& s = op_fits[o];
    const double work = in.ops[o].work;
    auto it = s.group ? fit_of.find(s.group) : fit_of.end();
    if (it == fit_of.end() || it->second.sample != "lone" || it->second.fit.method != "least_squares") return -1.0;
    const auto& f = it->second;
    if (f.subject == "compute" && f.launch_fit.usable)
      return s.launches * f.launch_fit.alpha_per_launch + f.launch_fit.beta * work;
    return f.fit.predict(work);
  };

  // Interference: per target class and interferer, per op kind rate ratios.
  for (int c = 0; c < 3; ++c)
    for (int x = 0; x < 4; ++x) {
      std::map<OpKind, std::array<double, 4>> rates;  // lone time, lone work, overlapped time, work
      std::map<OpKind, std::array<double, 2>> modelled;  // overlapped: time alone by the fit, time
      std::map<OpKind, int> lone_n, over_n, modelled_n;
      for (std::size_t o = 0; o < in.ops.size(); ++o) {
        const auto& s = in.ops[o];
        if (s.cls != c || s.work <= 0) continue;
        const auto k = s.kind;
        if (s.lone) {
          rates[k][0] += s.seconds;
          rates[k][1] += s.work;
          ++lone_n[k];
        } else if (s.overlapped_by == x) {
          rates[k][2] += s.seconds;
          rates[k][3] += s.work;
          ++over_n[k];
          if (const double alone = alone_seconds(o); alone > 0) {
            modelled[k][0] += alone;
            modelled[k][1] += s.seconds;
            ++modelled_n[k];
          }
        }
      }
      InterferenceFactor f;
      f.factor = kFactorNames[c];
      f.target = kClassNames[c];
      f.interferer = kClassNames[x];
      double weighted = 0;
      for (const auto& [k, r] : rates) {
        if (lone_n[k] == 0 || over_n[k] == 0 || r[2] <= 0) continue;
        const double lone_rate = r[0] / r[1], over_rate = r[2] / r[3];
        // Every overlapped op of the kind has a time-alone from a lone fit:
        // compare with that (a pooled rate counts startups as throughput,
        // which biases the factor when the sizes differ); else the rates.
        const bool by_fit = modelled_n[k] == over_n[k] && modelled[k][1] > 0;
        weighted += over_n[k] * (by_fit ? modelled[k][0] / modelled[k][1] : lone_rate / over_rate);
        f.lone_ops += lone_n[k];
        f.overlapped_ops += over_n[k];
      }
      if (f.overlapped_ops == 0) continue;
      f.value = weighted / f.overlapped_ops;
      model.interference.push_back(f);
    }
  model.host_issue = fit_host_issue(in.host, run.recognition.moe);
  return model;
}

}  // namespace moetrace::analyzer
