// MoE recognition: op ranges materialised from annotations, range rules and
// kernel names (moe_recognition.h has the rules of the game).
#include "moetrace/analyzer/moe_recognition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/gemm_shape.h"

namespace moetrace::analyzer {
namespace {

// A recognised host range.
struct Context {
  std::int64_t start = 0, end = 0;
  std::int64_t thread = 0;
  std::int32_t rank = 0;
  bool process = false;
  Annotation a;
  std::int64_t nvtx = -1;  // NvtxRange::id
  std::size_t range = 0;   // position in Trace::nvtx
  std::size_t index = 0;   // position in the context list (layer instances)
  std::int64_t backward_seq = -1;  // a backward node's autograd sequence number
};

// Coordinates gathered for one activity from the contexts open at its launch.
struct Placement {
  std::optional<OpKind> kind;            // innermost op context's kind
  std::int64_t kind_nvtx = -1;           // that context's range
  StringId kind_name;
  std::int32_t layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  std::optional<Phase> phase;
  std::int64_t layer_instance = -1;      // the layer context (numbered or not)
  std::int64_t chunk_instance = -1;      // the micro-batch context (named or implicit)
  bool in_layer = false;
  bool any = false;                      // some context covered it
  std::int64_t backward_seq = -1;        // innermost backward node's autograd sequence number
};

void merge(const Context& c, Placement& p, StringId name) {
  p.any = true;
  const auto& a = c.a;
  if (a.role == RangeRole::kOp && !p.kind) {
    p.kind = a.kind;
    p.kind_nvtx = c.nvtx;
    p.kind_name = name;
  }
  if (a.role == RangeRole::kMicroBatch && p.chunk_instance < 0) p.chunk_instance = static_cast<std::int64_t>(c.index);
  if (a.role == RangeRole::kLayer) {
    p.in_layer = true;
    if (p.layer_instance < 0) p.layer_instance = static_cast<std::int64_t>(c.index);
  }
  if (p.backward_seq < 0) p.backward_seq = c.backward_seq;
  if (p.layer < 0) p.layer = a.layer;
  if (p.iteration < 0) p.iteration = a.iteration;
  if (p.micro_batch < 0) p.micro_batch = a.micro_batch;
  if (p.chunk < 0) p.chunk = a.chunk;
  if (!p.phase) p.phase = a.phase;
}

// The kind of work outside MoE layers, by its category.
OpKind generic(Category c) {
  switch (c) {
    case Category::kAllToAll: return OpKind::kAllToAll;
    case Category::kAllReduce: return OpKind::kAllReduce;
    case Category::kOtherComm: return OpKind::kOtherComm;
    case Category::kMemcpy: return OpKind::kMemcpy;
    default: return OpKind::kOtherOp;
  }
}

bool is_moe_comm(OpKind k) {
  return k == OpKind::kDispatchAllToAll || k == OpKind::kCombineAllToAll ||
         k == OpKind::kRecommunicate || k == OpKind::kMoeAllReduce || k == OpKind::kTrans ||
         k == OpKind::kAgg;
}

// A collective name of a point-to-point transfer, as PyTorch's profiler
// ("send", "recv": ProcessGroupNCCL's record_param_comms) and NCCL's NVTX
// ranges ("ncclSend", "ncclRecv") record it, in any case.
bool is_point_to_point(std::string_view name) {
  std::string n = comparable_word(name);
  if (n.starts_with("nccl")) n.erase(0, 4);
  return n == "send" || n == "recv" || n == "isend" || n == "irecv" || n == "sendrecv" || n == "p2p";
}

// A collective name of an all-to-all(v): PyTorch's "all_to_all",
// "all_to_allv", "alltoall_base", NCCL's "ncclAllToAll", any case.
bool is_all_to_all_name(std::string_view name) {
  const std::string n = comparable_word(name);
  return n.find("alltoall") != std::string::npos || n.find("all2all") != std::string::npos;
}

// A process group that carries a pipeline's stage-to-stage transfers, by its
// recorded name or description: Megatron-Core's
// "PIPELINE_MODEL_PARALLEL_GROUP", a device mesh's "pp" dimension.
bool is_pipeline_group(std::string_view process_group) {
  std::string g(process_group);
  std::transform(g.begin(), g.end(), g.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (g.find("pipeline") != std::string::npos) return true;
  // "pp" as a word of its own ("pp", "mesh_pp", "(pp)").
  for (std::size_t at = g.find("pp"); at != std::string::npos; at = g.find("pp", at + 1)) {
    const bool start = at == 0 || std::isalnum(static_cast<unsigned char>(g[at - 1])) == 0;
    const bool end = at + 2 == g.size() || std::isalnum(static_cast<unsigned char>(g[at + 2])) == 0;
    if (start && end) return true;
  }
  return false;
}

// Elements -> bytes for the dtypes PyTorch's collectives report.
std::int64_t dtype_bytes(std::string_view dtype) {
  std::string d(dtype);
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (d == "float" || d == "float32" || d == "int" || d == "int32") return 4;
  if (d == "half" || d == "float16" || d == "bfloat16" || d == "short" || d == "int16") return 2;
  if (d == "double" || d == "float64" || d == "long" || d == "int64") return 8;
  if (d == "byte" || d == "char" || d == "uint8" || d == "int8" || d == "bool" || d.starts_with("float8"))
    return 1;
  return 0;
}

class Recognizer {
 public:
  Recognizer(Trace& t, const MoeRules& rules) : t_(t), rules_(rules) {}

  RecognitionStats run() {
    s_.ran = true;
    s_.activities_total = static_cast<std::int64_t>(t_.activities.size());
    collect_contexts();
    infer_containers();
    index_contexts();
    place_activities();
    step_iterations();
    // Without MoE evidence or iterations there is nothing to materialise
    // (a phase alone gives no row of the breakdown): the trace stays as it is.
    if (!s_.moe && !s_.iterations_marked) return s_;
    separate_point_to_point();
    infer_layers_and_directions();
    materialise();
    load_from_splits();
    return s_;
  }

 private:
  // 1. Contexts from the host ranges.
  std::optional<Annotation> recognise(const NvtxRange& r) {
    const auto key = std::pair{r.domain.value, r.name.value};
    if (auto it = cache_.find(key); it != cache_.end()) {
      if (it->second.second >= 0) ++s_.rules_used[rule_name(it->second.second)];
      else if (it->second.first) ++s_.annotations;
      return it->second.first;
    }
    const auto domain = t_.str(r.domain), name = t_.str(r.name);
    Annotation a;
    std::string why;
    switch (parse_annotation(domain, name, a, &why)) {
      case AnnotationParse::kOk:
        ++s_.annotations;
        cache_[key] = {a, -1};
        return a;
      case AnnotationParse::kMalformed:
        ++s_.annotations_malformed;
        if (s_.first_malformed.empty()) s_.first_malformed = fmt::format("\"{}\": {}", name, why);
        return std::nullopt;  // not cached: each malformed range counts
      case AnnotationParse::kNotAnnotation: break;
    }
    const std::string text(name);
    std::string lower_text;  // made once, for the rules with keywords
    for (std::size_t i = 0; i < rules_.ranges.size(); ++i) {
      const auto& rule = rules_.ranges[i];
      if (!rule.domain.empty() && rule.domain != domain) continue;
      if (!rule.required_prefix.empty() && !name.starts_with(rule.required_prefix)) continue;
      if (!rule.keywords.empty()) {
        if (lower_text.empty())
          for (char ch : text) lower_text += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (std::none_of(rule.keywords.begin(), rule.keywords.end(),
                         [&](const std::string& k) { return lower_text.find(k) != std::string::npos; }))
          continue;
      }
      std::smatch m;
      if (!std::regex_search(text, m, rule.regex())) continue;
      Annotation out;
      out.role = rule.role;
      out.kind = rule.kind;
      out.phase = rule.phase;
      auto coord = [&](const RuleCoordinate& c) -> std::int32_t {
        if (c.value >= 0) return c.value;
        if (c.group <= 0 || static_cast<std::size_t>(c.group) >= m.size() || !m[static_cast<std::size_t>(c.group)].matched)
          return -1;
        const auto digits = m[static_cast<std::size_t>(c.group)].str();
        std::int32_t v = -1;
        if (!digits.empty() && digits.size() <= 9 && std::all_of(digits.begin(), digits.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
          v = std::stoi(digits);
        return v;
      };
      if (rule.phase_group > 0 && static_cast<std::size_t>(rule.phase_group) < m.size() &&
          m[static_cast<std::size_t>(rule.phase_group)].matched)
        out.phase = parse_phase_marker(m[static_cast<std::size_t>(rule.phase_group)].str());
      out.layer = coord(rule.layer);
      out.iteration = coord(rule.iteration);
      out.micro_batch = coord(rule.micro_batch);
      out.chunk = coord(rule.chunk);
      cache_[key] = {out, static_cast<std::int32_t>(i)};
      process_rule_[key] = rule.process_scope;
      ++s_.rules_used[rule_name(static_cast<std::int32_t>(i))];
      return out;
    }
    cache_[key] = {std::nullopt, -1};
    return std::nullopt;
  }

  std::string rule_name(std::int32_t i) const {
    const auto& r = rules_.ranges[static_cast<std::size_t>(i)];
    return r.preset + ": " + r.label;
  }

  void collect_contexts() {
    for (std::size_t ri = 0; ri < t_.nvtx.size(); ++ri) {
      const auto& r = t_.nvtx[ri];
      auto a = recognise(r);
      if (!a) continue;
      ++s_.ranges_matched;
      if (a->role == RangeRole::kIterationEnd) {  // not a context: counted by step_iterations()
        step_ends_[r.rank.value].push_back(end_of(r));
        continue;
      }
      Context c = context_of(ri);
      c.a = *a;
      if (r.autograd_backward) c.backward_seq = r.autograd_seq;
      const auto key = std::pair{r.domain.value, r.name.value};
      c.process = a->role == RangeRole::kIteration ||
                  (process_rule_.count(key) && process_rule_[key]);
      if (a->role == RangeRole::kIteration || a->iteration >= 0) s_.iterations_marked = true;
      if (a->phase && is_backward(*a->phase)) s_.phases_marked = true;
      if (a->role == RangeRole::kLayer || a->layer >= 0) s_.layers_marked = true;
      if ((a->kind && op_kind_info(*a->kind).moe_layer) || a->role == RangeRole::kLayer) s_.moe = true;
      add_context(c);
    }
  }

  // A range never closed lasts to the end of the trace.
  static std::int64_t end_of(const NvtxRange& r) { return r.end_ns < 0 ? INT64_MAX : r.end_ns; }

  // The context of host range `ri`, its annotation still to be set.
  Context context_of(std::size_t ri) const {
    const auto& r = t_.nvtx[ri];
    Context c;
    c.start = r.start_ns;
    c.end = end_of(r);
    c.thread = r.thread_id;
    c.rank = r.rank.value;
    c.nvtx = r.id;
    c.range = ri;
    c.index = contexts_.size();
    return c;
  }

  void add_context(const Context& c) {
    context_names_.push_back(t_.nvtx[c.range].name);
    contexts_.push_back(c);
  }

  // Per thread (and per rank for process-wide ones), the contexts in start order.
  void index_contexts() {
    for (const auto& c : contexts_)
      (c.process ? by_rank_[c.rank] : by_thread_[{c.rank, c.thread}]).push_back(c.index);
    auto by_start = [&](std::size_t x, std::size_t y) {
      return contexts_[x].start != contexts_[y].start ? contexts_[x].start < contexts_[y].start
                                                      : contexts_[x].end > contexts_[y].end;
    };
    for (auto& [k, v] : by_thread_) std::sort(v.begin(), v.end(), by_start);
    for (auto& [k, v] : by_rank_) std::sort(v.begin(), v.end(), by_start);
  }

  // 1b. Implicit layer and chunk instances from the nesting of host ranges.
  // Schedules that overlap the chunks of several micro-batches name the
  // parts of an MoE block (dispatch(F), mlp(B), ...) but neither layer nor
  // micro-batch; the functions that run them do nest (Python function and
  // module ranges, recorded with with_stack=True). A part's implicit layer
  // instance is its highest enclosing range (on its thread) that holds at
  // most one part of each kind and phase; the range above that one is its
  // chunk. Parts inside a recognised layer or micro-batch range keep those.
  void infer_containers() {
    std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> parts_by_thread;
    for (const auto& c : contexts_)
      if (c.a.role == RangeRole::kOp && c.a.kind && op_kind_info(*c.a.kind).moe_layer && !c.process)
        parts_by_thread[{c.rank, c.thread}].push_back(c.index);
    if (parts_by_thread.empty()) return;
    // Parents of the host ranges on those threads: sorted by (start, longer
    // first), a stack of the open ranges; a range's parent is the innermost
    // open range that contains it.
    std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> ranges_by_thread;
    for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
      const auto& r = t_.nvtx[i];
      const auto key = std::pair{r.rank.value, r.thread_id};
      if (parts_by_thread.count(key)) ranges_by_thread[key].push_back(i);
    }
    std::vector<std::size_t> parent(t_.nvtx.size(), SIZE_MAX);  // per range: the range enclosing it
    auto end = [&](std::size_t i) { return end_of(t_.nvtx[i]); };
    for (auto& [key, list] : ranges_by_thread) {
      std::sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
        const auto& a = t_.nvtx[x];
        const auto& b = t_.nvtx[y];
        return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : end(x) != end(y) ? end(x) > end(y) : x < y;
      });
      std::vector<std::size_t> open;
      for (auto i : list) {
        while (!open.empty() && end(open.back()) <= t_.nvtx[i].start_ns) open.pop_back();
        if (!open.empty() && end(open.back()) >= end(i)) parent[i] = open.back();
        open.push_back(i);
      }
    }
    // Parts under every range: how many, and whether two share a kind and phase.
    std::vector<int> parts_in(t_.nvtx.size(), 0);
    std::vector<char> repeated(t_.nvtx.size(), 0);
    std::unordered_map<std::uint64_t, int> of_key;  // (range, kind, phase) -> parts
    for (const auto& [thread, parts] : parts_by_thread)
      for (auto ci : parts) {
        const auto& c = contexts_[ci];
        const std::uint64_t key = static_cast<std::uint64_t>(*c.a.kind) * 8 + (c.a.phase ? static_cast<std::uint64_t>(*c.a.phase) + 1 : 0);
        for (auto up = parent[c.range]; up != SIZE_MAX; up = parent[up]) {
          ++parts_in[up];
          if (++of_key[static_cast<std::uint64_t>(up) * 1024 + key] > 1) repeated[up] = 1;
        }
      }
    auto unique = [&](std::size_t range) { return repeated[range] == 0; };
    std::vector<char> recognised(t_.nvtx.size(), 0);  // ranges that are contexts already
    std::vector<char> structural(t_.nvtx.size(), 0);  // ... of a layer or micro-batch
    std::vector<char> iteration(t_.nvtx.size(), 0);   // ... of an iteration
    for (const auto& c : contexts_) {
      recognised[c.range] = 1;
      if (c.a.role == RangeRole::kLayer || c.a.role == RangeRole::kMicroBatch) structural[c.range] = 1;
      if (c.a.role == RangeRole::kIteration) iteration[c.range] = 1;
    }
    std::set<std::size_t> layers, chunks;
    for (const auto& [thread, parts] : parts_by_thread)
      for (auto ci : parts) {
        const auto& c = contexts_[ci];
        // A part inside a recognised layer or micro-batch range keeps those:
        // no implicit container (above a module's range lies the training
        // step, whose other work is not the layer's).
        bool placed = false;
        for (auto up = parent[c.range]; up != SIZE_MAX && !placed; up = parent[up]) placed = structural[up] != 0;
        if (placed) continue;
        // The highest enclosing range with one part of each kind and phase,
        // below the iteration's range.
        std::size_t top = SIZE_MAX;
        for (auto up = parent[c.range]; up != SIZE_MAX && unique(up) && !iteration[up]; up = parent[up]) top = up;
        // A layer instance holds several parts (one alone is a wrapper of that part).
        if (top != SIZE_MAX && parts_in[top] >= 2 && !recognised[top]) {
          layers.insert(top);
          ++s_.layers_by_nesting;
        }
        const auto chunk = top == SIZE_MAX ? parent[c.range] : parent[top];
        if (chunk != SIZE_MAX && !recognised[chunk]) chunks.insert(chunk);
      }
    // They join the contexts as layer and micro-batch ranges without numbers.
    auto add = [&](std::size_t range, RangeRole role) {
      Context c = context_of(range);
      c.a.role = role;
      add_context(c);
    };
    for (auto r : layers) add(r, RangeRole::kLayer);
    for (auto r : chunks)
      if (!layers.count(r)) add(r, RangeRole::kMicroBatch);
  }

  // 2. Each activity's placement and kind.
  struct Query {
    std::int32_t rank;
    std::int64_t thread, t;
    std::size_t activity;
    bool has_call;
  };

  // The contexts open at each query's time on its thread (and the rank's
  // process-wide ones), merged innermost first; `on` receives each.
  template <class On>
  void sweep(std::vector<Query>& queries, On&& on) {
    std::sort(queries.begin(), queries.end(), [](const Query& a, const Query& b) {
      return std::tie(a.rank, a.thread, a.t) < std::tie(b.rank, b.thread, b.t);
    });
    static const std::vector<std::size_t> kNone;
    for (std::size_t q = 0; q < queries.size();) {
      const auto rank = queries[q].rank;
      const auto thread = queries[q].thread;
      const auto it = queries[q].has_call ? by_thread_.find({rank, thread}) : by_thread_.end();
      const auto& list = it == by_thread_.end() ? kNone : it->second;
      const auto pit = by_rank_.find(rank);
      const auto& plist = pit == by_rank_.end() ? kNone : pit->second;
      // The latest end among the first k process-wide contexts: the walk back
      // from the last one started stops where no earlier one reaches tq.
      std::vector<std::int64_t> reach(plist.size());
      for (std::size_t k = 0; k < plist.size(); ++k)
        reach[k] = std::max(k ? reach[k - 1] : INT64_MIN, contexts_[plist[k]].end);
      std::size_t next = 0;
      std::vector<std::size_t> open;  // contexts open on this thread, in start order
      for (; q < queries.size() && queries[q].rank == rank && queries[q].thread == thread; ++q) {
        const auto tq = queries[q].t;
        while (next < list.size() && contexts_[list[next]].start <= tq) open.push_back(list[next++]);
        std::erase_if(open, [&](std::size_t c) { return contexts_[c].end < tq; });
        Placement p;
        for (auto c = open.rbegin(); c != open.rend(); ++c) merge(contexts_[*c], p, context_names_[*c]);
        // Process-wide contexts (iterations), innermost (latest start) first.
        auto k = static_cast<std::size_t>(
            std::upper_bound(plist.begin(), plist.end(), tq,
                             [&](std::int64_t t, std::size_t c) { return t < contexts_[c].start; }) -
            plist.begin());
        while (k > 0 && reach[k - 1] >= tq) {
          const auto c = plist[--k];
          if (contexts_[c].end >= tq) merge(contexts_[c], p, context_names_[c]);
        }
        on(queries[q], p);
      }
    }
  }

  // 2a. Backward nodes of PyTorch's autograd run on a thread of their own,
  // outside the module ranges of the forward; the forward op with the same
  // sequence number ran inside them. Its placement, by (rank, sequence).
  void forward_placements() {
    bool backward_nodes = false;
    for (const auto& c : contexts_) backward_nodes = backward_nodes || c.backward_seq >= 0;
    if (!backward_nodes) return;
    std::vector<Query> queries;
    for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
      const auto& r = t_.nvtx[i];
      if (r.autograd_seq >= 0 && !r.autograd_backward)
        queries.push_back({r.rank.value, r.thread_id, r.start_ns, i, true});
    }
    sweep(queries, [&](const Query& q, const Placement& p) {
      if (!p.kind && !p.in_layer) return;
      // The first forward op of a sequence (nested ops share it; the sweep
      // goes by start) speaks for it.
      const auto& r = t_.nvtx[q.activity];
      forward_.try_emplace({r.rank.value, r.autograd_seq}, p);
    });
  }

  void place_activities() {
    placed_.assign(t_.activities.size(), Placement{});
    launch_t_.assign(t_.activities.size(), 0);
    kind_.assign(t_.activities.size(), std::nullopt);
    fallback_.assign(t_.activities.size(), std::nullopt);
    pending_direction_.assign(t_.activities.size(), false);
    loose_a2a_.assign(t_.activities.size(), false);
    forward_placements();
    std::vector<Query> queries;
    queries.reserve(t_.activities.size());
    for (std::size_t i = 0; i < t_.activities.size(); ++i) {
      const auto& a = t_.activities[i];
      const ApiCall* call = t_.launching_call(a);
      launch_t_[i] = call ? call->start_ns : a.start_ns;
      queries.push_back({a.rank.value, call ? call->thread_id : INT64_MIN, launch_t_[i], i, call != nullptr});
    }
    sweep(queries, [&](const Query& q, Placement& p) {
      // A backward node outside every MoE range: the forward op of the same
      // sequence number says which module (layer, gate, experts) it is.
      if (p.backward_seq >= 0 && !p.kind && !p.in_layer)
        if (const auto f = forward_.find({t_.activities[q.activity].rank.value, p.backward_seq}); f != forward_.end()) {
          p.kind = f->second.kind;
          p.kind_nvtx = f->second.kind_nvtx;
          p.kind_name = f->second.kind_name;
          p.in_layer = f->second.in_layer;
          p.layer_instance = f->second.layer_instance;
          if (p.layer < 0) p.layer = f->second.layer;
          ++s_.backward_by_sequence;
        }
      decide_kind(q.activity, p);
      placed_[q.activity] = p;
    });
  }

  const KernelRule* kernel_rule(const Activity& a) {
    if (a.type != ActivityType::kKernel || !a.name.valid()) return nullptr;
    auto [it, fresh] = kernel_rule_cache_.try_emplace(a.name.value, nullptr);
    if (fresh) {
      const auto name = t_.str(a.name);
      it->second = match_kernel_rule(rules_.kernels, name);
      if (!it->second)
        if (const int i = match_kernel_rule(name); i >= 0) it->second = &kernel_rules()[static_cast<std::size_t>(i)];
    }
    return it->second;
  }

  void decide_kind(std::size_t i, Placement& p) {
    const auto& a = t_.activities[i];
    const KernelRule* rule = kernel_rule(a);
    const bool copy = a.type != ActivityType::kKernel;
    const Category cat = copy ? Category::kMemcpy : rule ? rule->category : Category::kOtherCompute;
    // NCCL runs all-to-all and a pipeline stage's send/recv in the same
    // kernel (SendRecv); the collective the trace records tells them apart.
    if (cat == Category::kAllToAll)
      if (const auto* c = collective(a, launch_t_[i]); c && is_point_to_point(c->name)) {
        ++s_.rules_used["collective: point-to-point send/recv (pipeline stages), not all-to-all"];
        kind_[i] = OpKind::kOtherComm;
        return;
      }
    const bool in_moe = p.in_layer || (p.kind && op_kind_info(*p.kind).moe_layer);
    std::optional<OpKind> kind;
    if (copy) {
      if (p.kind && (*p.kind == OpKind::kOffload || *p.kind == OpKind::kPrefetch)) kind = p.kind;
      else kind = in_moe ? OpKind::kMoeMemcpy : OpKind::kMemcpy;
    } else if (rule && rule->kind) {
      kind = rule->kind;
      ++s_.kernels_by_name;
      s_.moe = true;
      ++s_.rules_used["kernel: " + rule->display_name()];
    } else if (is_communication(cat) && p.kind && is_communication(op_category(*p.kind))) {
      kind = p.kind;
    } else if (cat == Category::kAllToAll && in_moe) {
      kind = OpKind::kDispatchAllToAll;
      pending_direction_[i] = true;
    } else if (cat == Category::kAllReduce && in_moe) {
      kind = OpKind::kMoeAllReduce;
    } else if (is_communication(cat)) {
      kind = generic(cat);
      loose_a2a_[i] = cat == Category::kAllToAll;
    } else if (p.kind) {
      // Communication is decided by what ran, the rest by where it ran: the
      // compute inside a dispatch is its token permutation.
      switch (*p.kind) {
        case OpKind::kDispatchAllToAll:
        case OpKind::kRecommunicate: kind = OpKind::kPermute; break;
        case OpKind::kCombineAllToAll: kind = OpKind::kUnpermute; break;
        default: kind = is_moe_comm(*p.kind) ? OpKind::kMoeOther
                        : is_communication(op_category(*p.kind)) ? OpKind::kOtherOp
                                                                 : *p.kind;
      }
    } else if (in_moe) {
      kind = cat == Category::kGating ? OpKind::kGate
             : cat == Category::kExpertCompute ? OpKind::kExpertFfn
                                               : OpKind::kMoeOther;
    } else if (p.any) {
      kind = generic(cat);
    } else {
      fallback_[i] = generic(cat);  // taken when the whole trace is one iteration of an MoE job
    }
    kind_[i] = kind;
  }

  // 2b. Where no range marks iterations but ranges end them (an optimizer's
  // step: a training loop profiled without ProfilerStep), an activity
  // launched after the k-th step of its rank ended is in iteration k (the
  // step's own work closes the iteration it ends).
  void step_iterations() {
    if (s_.iterations_marked || step_ends_.empty()) return;
    for (auto& [rank, ends] : step_ends_) std::sort(ends.begin(), ends.end());
    for (std::size_t i = 0; i < placed_.size(); ++i) {
      const auto it = step_ends_.find(t_.activities[i].rank.value);
      if (it == step_ends_.end()) {  // a rank without steps: one iteration, as without any
        placed_[i].iteration = std::max(placed_[i].iteration, 0);
        continue;
      }
      const auto& ends = it->second;
      placed_[i].iteration =
          static_cast<std::int32_t>(std::upper_bound(ends.begin(), ends.end(), launch_t_[i]) - ends.begin());
      // Every activity is in some iteration, as under ProfilerStep ranges:
      // work outside the recognised ranges keeps its generic kind.
      if (!kind_[i]) kind_[i] = fallback_[i];
    }
    s_.iterations_marked = true;
    s_.iterations_from_steps = true;
  }

  // 2b. A pipeline stage's send/recv told from an all-to-all where no
  // collective name did it (NCCL runs both in its SendRecv kernel, and
  // batch_isend_irecv records only "coalesced"). For the all-to-all-class
  // kernels outside every MoE range:
  //  - the process group the trace recorded: a pipeline group, or a group
  //    of two ranks (one peer), is point-to-point;
  //  - else the communicator it ran on: another NCCL stream than the
  //    rank's known all-to-alls (inside MoE ranges, or named) used.
  // Pairing by time across ranks says nothing here: the stage pairs of a
  // pipeline send at the same moment, so a send overlaps as many ranks' kernels
  // as an all-to-all does.
  void separate_point_to_point() {
    std::vector<std::size_t> loose;
    for (std::size_t i = 0; i < loose_a2a_.size(); ++i)
      if (loose_a2a_[i]) loose.push_back(i);
    if (loose.empty()) return;
    auto point_to_point = [&](std::size_t i, const char* rule) {
      kind_[i] = OpKind::kOtherComm;
      loose_a2a_[i] = false;
      ++s_.rules_used[rule];
    };
    std::vector<std::size_t> unnamed, named_a2a;
    for (const auto i : loose) {
      const auto* c = collective(t_.activities[i], launch_t_[i]);
      if (c && is_all_to_all_name(c->name)) {
        named_a2a.push_back(i);
        continue;
      }
      if (c && is_pipeline_group(c->process_group))
        point_to_point(i, "collective group: pipeline process group, send/recv not all-to-all");
      else if (c && c->recorded_ranks() == 2)
        point_to_point(i, "collective group: two ranks (one peer), send/recv not all-to-all");
      else
        unnamed.push_back(i);
    }
    if (unnamed.empty()) return;
    // The communicator: PyTorch gives every process group (and every
    // send/recv pair) its own NCCL stream, so a kernel on a stream that none
    // of the rank's known all-to-alls used ran on another group's
    // communicator than the expert-parallel one.
    std::set<std::pair<std::int32_t, std::int32_t>> a2a_streams;  // (rank, stream index)
    auto known = [&](std::size_t i) {
      const auto& a = t_.activities[i];
      a2a_streams.emplace(a.rank.value, a.stream);
    };
    for (const auto i : named_a2a) known(i);
    for (std::size_t i = 0; i < t_.activities.size(); ++i)
      if (!loose_a2a_[i] && kind_[i] && (*kind_[i] == OpKind::kDispatchAllToAll || *kind_[i] == OpKind::kCombineAllToAll))
        if (const auto* rule = kernel_rule(t_.activities[i]); rule && rule->category == Category::kAllToAll) known(i);
    for (const auto i : unnamed) {
      const auto& a = t_.activities[i];
      const auto first = a2a_streams.lower_bound({a.rank.value, INT32_MIN});
      if (first == a2a_streams.end() || first->first != a.rank.value) continue;  // no all-to-all known on the rank
      if (!a2a_streams.count({a.rank.value, a.stream}))
        point_to_point(i, "communicator: another NCCL stream than the MoE all-to-alls' (send/recv, not an MoE all-to-all)");
    }
  }

  // 3. Layers and all-to-all directions inferred by order.
  void infer_layers_and_directions() {
    // Dispatch-direction kernels in the backward are the backward of the
    // combine (its gradient flows from tokens to experts), and vice versa.
    for (std::size_t i = 0; i < placed_.size(); ++i) {
      auto& k = kind_[i];
      const auto& p = placed_[i];
      if (!k || pending_direction_[i] || !p.phase || !is_backward(*p.phase)) continue;
      const auto* rule = kernel_rule(t_.activities[i]);
      if (!rule || !rule->kind) continue;
      if (*k == OpKind::kDispatchAllToAll) k = OpKind::kCombineAllToAll;
      else if (*k == OpKind::kCombineAllToAll) k = OpKind::kDispatchAllToAll;
    }
    if (s_.moe) {
      for (std::size_t i = 0; i < placed_.size(); ++i) {
        // The whole trace is one iteration where no range marks them.
        if (!s_.iterations_marked) {
          placed_[i].iteration = std::max(placed_[i].iteration, 0);
          if (!kind_[i]) kind_[i] = fallback_[i];
        }
        // In an MoE job, an all-to-all outside the ranges is an MoE layer's
        // dispatch or combine.
        if (kind_[i] && loose_a2a_[i]) {
          kind_[i] = OpKind::kDispatchAllToAll;
          pending_direction_[i] = true;
          ++s_.a2a_assumed_moe;
        }
      }
    }
    // Group MoE activities by (rank, iteration, chunk, phase) in launch order:
    // layers are counted within each chunk (a micro-batch range, or the
    // implicit chunk of overlapped schedules) and phase, so that chunks of
    // several micro-batches that interleave do not run into one count.
    using GroupKey = std::tuple<std::int32_t, std::int32_t, std::int64_t, int>;  // rank, iteration, chunk, phase
    std::map<GroupKey, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < placed_.size(); ++i) {
      if (!kind_[i] || !op_kind_info(*kind_[i]).moe_layer) continue;
      const auto& p = placed_[i];
      groups[{t_.activities[i].rank.value, p.iteration, p.chunk_instance,
              static_cast<int>(p.phase.value_or(Phase::kForward))}]
          .push_back(i);
    }
    std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> forward_layers;  // (rank, iteration), no chunks
    std::map<GroupKey, std::int32_t> instances;
    std::set<std::int32_t> layer_counts, chunk_layer_counts;
    std::int32_t per_chunk = 0;  // layers of a chunk: the most forward instances of any chunk
    for (auto& [key, list] : groups) {
      std::stable_sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) { return launch_t_[x] < launch_t_[y]; });
      const auto& [rank, iteration, chunk, phase] = key;
      const bool backward = is_backward(static_cast<Phase>(phase));
      const auto n = instances[key] = number_instances(list, backward);
      if (backward) continue;
      if (chunk == -1) {
        forward_layers[{rank, iteration}] = n;
        if (iteration >= 0) layer_counts.insert(n);
      } else {
        per_chunk = std::max(per_chunk, n);
        chunk_layer_counts.insert(n);
      }
    }
    // Chunks without a micro-batch number are numbered in order of their
    // first launch within (rank, iteration, phase).
    std::map<std::tuple<std::int32_t, std::int32_t, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> chunk_order;
    for (const auto& [key, list] : groups) {
      const auto& [rank, iteration, chunk, phase] = key;
      if (chunk != -1 && !list.empty() && placed_[list.front()].micro_batch < 0)
        chunk_order[{rank, iteration, phase}].push_back({launch_t_[list.front()], chunk});
    }
    std::map<std::pair<std::tuple<std::int32_t, std::int32_t, int>, std::int64_t>, std::int32_t> chunk_ordinal;
    for (auto& [k, v] : chunk_order) {
      std::sort(v.begin(), v.end());
      for (std::size_t j = 0; j < v.size(); ++j) chunk_ordinal[{k, v[j].second}] = static_cast<std::int32_t>(j);
    }
    for (auto& [key, list] : groups) {
      const auto& [rank, iteration, chunk, phase] = key;
      const bool backward = is_backward(static_cast<Phase>(phase));
      // Layers to count down from in the backward: the chunk's own count, the
      // iteration's forward count, or (forward chunks, backward without) a
      // forward chunk's; a backward that runs several such passes in a row
      // (micro-batches) counts down in each.
      std::int32_t n = -1;
      if (chunk != -1) {
        n = instances[key];
      } else if (const auto f = forward_layers.find({rank, iteration}); f != forward_layers.end()) {
        n = f->second;
      } else if (per_chunk > 0) {
        n = per_chunk;
      }
      for (auto i : list) {
        auto& p = placed_[i];
        if (chunk != -1 && p.micro_batch < 0)
          if (auto o = chunk_ordinal.find({{rank, iteration, phase}, chunk}); o != chunk_ordinal.end())
            p.micro_batch = o->second;
        if (p.layer >= 0 || instance_[i] < 0) continue;
        std::int32_t layer = instance_[i];
        if (backward && n > 0) {
          layer = n - 1 - instance_[i] % n;
          if (instances[key] > n && p.micro_batch < 0) p.micro_batch = instance_[i] / n;
        }
        // Model chunks of one rank (interleaved and V schedules) hold
        // different layers: chunk c's k-th layer comes after c whole chunks.
        if (chunk != -1 && p.chunk > 0 && per_chunk > 0) layer += p.chunk * per_chunk;
        p.layer = layer;
        ++s_.layers_by_order;
      }
    }
    if (layer_counts.size() > 1)
      s_.ambiguities.push_back(fmt::format(
          "layers by order: the number of MoE layer instances per iteration and rank differs ({} to {}), so "
          "the k-th instance is not the same layer everywhere",
          *layer_counts.begin(), *layer_counts.rbegin()));
    if (chunk_layer_counts.size() > 1)
      s_.ambiguities.push_back(fmt::format(
          "layers by order: the number of MoE layer instances per forward chunk differs ({} to {}), so the "
          "k-th instance is not the same layer in every chunk",
          *chunk_layer_counts.begin(), *chunk_layer_counts.rbegin()));
  }

  // Numbers the MoE layer instances of one (rank, iteration, phase) group
  // and resolves pending all-to-all directions; returns the instance count.
  std::int32_t number_instances(const std::vector<std::size_t>& list, bool backward) {
    instance_.resize(placed_.size(), -1);
    // Instances from layer contexts (numbered or not), in order of appearance.
    std::map<std::int64_t, std::int32_t> from_context;
    std::int32_t next = 0;
    // Without layer contexts: a new instance starts at a gate, a permute or
    // an opening all-to-all that follows a closing one.
    const OpKind opening = backward ? OpKind::kCombineAllToAll : OpKind::kDispatchAllToAll;
    const OpKind closing = backward ? OpKind::kDispatchAllToAll : OpKind::kCombineAllToAll;
    std::int32_t current = -1;
    bool closed = false, seen_non_gate = false;
    // Pending directions per instance, resolved after: first half opening.
    std::map<std::int32_t, std::vector<std::size_t>> pending;
    for (auto i : list) {
      const auto& p = placed_[i];
      auto& k = *kind_[i];
      if (p.layer_instance >= 0) {
        auto [it, fresh] = from_context.try_emplace(p.layer_instance, next);
        if (fresh) ++next;
        instance_[i] = it->second;
        if (pending_direction_[i]) pending[instance_[i]].push_back(i);
        continue;
      }
      if (p.layer >= 0) continue;  // named by a range: nothing to infer
      const bool starts = current < 0 ||
                          (closed && (k == OpKind::kGate || k == OpKind::kPermute || k == opening ||
                                      pending_direction_[i])) ||
                          (k == OpKind::kGate && seen_non_gate && !backward);
      if (starts) {
        current = next++;
        closed = false;
        seen_non_gate = false;
      }
      if (k != OpKind::kGate) seen_non_gate = true;
      instance_[i] = current;
      if (pending_direction_[i]) {
        // Alternate within the instance: opening, then closing.
        auto& pend = pending[current];
        pend.push_back(i);
        if (pend.size() % 2 == 0) closed = true;
      } else if (k == closing) {
        closed = true;
      }
    }
    for (auto& [inst, ids] : pending) {
      if (ids.size() % 2 != 0 && ambiguous_directions_++ == 0)
        s_.ambiguities.push_back(
            "all-to-all direction by order: a layer instance has an odd number of all-to-all kernels, so "
            "which are its dispatch and which its combine is a guess");
      const std::size_t half = (ids.size() + 1) / 2;
      for (std::size_t j = 0; j < ids.size(); ++j) {
        *kind_[ids[j]] = j < half ? opening : closing;
        ++s_.directions_by_order;
      }
    }
    return next;
  }

  // 4. One op range per placed activity.
  void materialise() {
    std::int64_t id = 1;
    std::map<std::string, StringId> interned;
    auto intern = [&](std::string text) {
      auto [it, fresh] = interned.try_emplace(text, StringId(static_cast<std::int64_t>(t_.strings.size())));
      if (fresh) t_.strings.push_back(std::move(text));
      return it->second;
    };
    // A GEMM kernel's FLOPs from the shapes its framework op recorded
    // (record_shapes=True): 2 x rows x in x out, given to the first kernel
    // the op launched (a split-K reduction after it computes none of them).
    const LaunchShapes shapes(t_);
    std::set<std::size_t> counted;
    for (std::size_t i = 0; i < t_.activities.size(); ++i) {
      if (!kind_[i]) continue;
      auto& a = t_.activities[i];
      const auto& p = placed_[i];
      OpRange op;
      if (a.type == ActivityType::kKernel && !shapes.empty())
        if (const auto range = shapes.range_of(a); range && counted.insert(*range).second)
          if (const auto g = shapes.gemm_of(*range)) op.flops = g->flops();
      op.id = OpId(id++);
      op.start_ns = a.start_ns;
      op.end_ns = a.end_ns;
      op.stream = a.stream;
      op.rank = a.rank;
      op.kind = *kind_[i];
      op.layer = op_kind_info(op.kind).moe_layer ? p.layer : -1;
      op.iteration = p.iteration;
      op.micro_batch = p.micro_batch;
      op.chunk = p.chunk;
      op.phase = p.phase.value_or(Phase::kForward);
      op.name = a.type == ActivityType::kKernel && a.name.valid() ? a.name
                                                                  : intern(std::string(op_kind_name(op.kind)));
      if (a.type != ActivityType::kKernel) op.bytes = a.bytes;
      if (const auto* c = collective(a, is_communication(op_category(op.kind)) ? launch_t_[i] : -1)) {
        const auto eb = dtype_bytes(c->dtype);
        if (eb > 0 && c->in_nelems >= 0) op.bytes = c->in_nelems * eb;
        // What an all-to-all receives, counted as its input is (the whole
        // output): the fit can then take the volume rule its times follow.
        if (eb > 0 && c->out_nelems >= 0 && collective_kind(op.kind) == "all_to_all")
          op.recv_bytes = c->out_nelems * eb;
      }
      a.op = static_cast<std::int32_t>(t_.ops.size());
      t_.ops.push_back(op);
      ++s_.activities_placed;
    }
    t_.index_ops();
    t_.kernel_category.resize(t_.strings.size(), -1);  // the loader classified the kernel names
    if (!rules_.kernels.empty())
      for (const auto& a : t_.activities)
        if (a.type == ActivityType::kKernel && a.name.valid())
          if (const auto* r = match_kernel_rule(rules_.kernels, t_.str(a.name)))
            t_.kernel_category[static_cast<std::size_t>(a.name.value)] = static_cast<std::int8_t>(r->category);
  }

  // The collective a kernel ran: by correlation id (Kineto's kernel args),
  // else, for a communication kernel, the NCCL call whose host range holds
  // its launch (nsys's NCCL payloads have no correlation id).
  const Collective* collective(const Activity& a, std::int64_t launch_ns = -1) {
    if (a.type == ActivityType::kKernel && launch_ns >= 0) {
      if (!host_calls_built_) {
        host_calls_built_ = true;
        for (const auto& c : t_.collectives)
          if (c.correlation_id == 0) host_calls_.push_back(&c);
        std::sort(host_calls_.begin(), host_calls_.end(), [](const Collective* x, const Collective* y) {
          return std::tie(x->rank, x->start_ns) < std::tie(y->rank, y->start_ns);
        });
      }
      // The call of the rank that started last before the launch (NCCL calls
      // of a thread do not nest).
      auto after = std::upper_bound(host_calls_.begin(), host_calls_.end(), std::pair{a.rank, launch_ns},
                                    [](const std::pair<RankId, std::int64_t>& k, const Collective* c) {
                                      return std::tie(k.first, k.second) < std::tie(c->rank, c->start_ns);
                                    });
      if (after != host_calls_.begin()) {
        const auto* c = *std::prev(after);
        if (c->rank == a.rank && launch_ns <= c->end_ns) return c;
      }
    }
    if (a.correlation_id == 0) return nullptr;
    if (by_correlation_.empty() && !t_.collectives.empty()) {
      // A compact copy of the keys (the collectives are sorted by them): the
      // search touches a few cache lines, not one collective record a step.
      by_correlation_.reserve(t_.collectives.size());
      for (const auto& c : t_.collectives) by_correlation_.push_back({c.rank.value, c.correlation_id});
    }
    const std::pair key{a.rank.value, a.correlation_id};
    const auto it = std::lower_bound(by_correlation_.begin(), by_correlation_.end(), key);
    return it != by_correlation_.end() && *it == key ? &t_.collectives[static_cast<std::size_t>(it - by_correlation_.begin())]
                                                     : nullptr;
  }

  // Load per destination rank from the forward dispatches' split sizes.
  void load_from_splits() {
    if (!t_.expert_load.empty()) return;
    std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t>, std::int64_t> load;
    for (const auto& a : t_.activities) {
      if (a.op < 0) continue;
      const auto& op = t_.ops[static_cast<std::size_t>(a.op)];
      if (op.kind != OpKind::kDispatchAllToAll || op.phase != Phase::kForward || op.layer < 0 || op.iteration < 0)
        continue;
      const auto* c = collective(a);
      if (!c || c->in_splits.empty()) continue;
      ++s_.load_collectives;
      for (std::size_t j = 0; j < c->in_splits.size(); ++j)
        load[{op.iteration, op.layer, op.rank.value, static_cast<std::int32_t>(j)}] += c->in_splits[j];
    }
    for (const auto& [k, tokens] : load)
      t_.expert_load.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), tokens});
    if (load.empty()) return;
    t_.expert_load_by_rank = true;
    t_.expert_load_origin =
        "all-to-all split sizes of the forward dispatches (elements sent to each destination rank, one "
        "\"expert\" per rank: the load of ranks, not of single experts)";
  }

  Trace& t_;
  const MoeRules& rules_;
  RecognitionStats s_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::pair<std::optional<Annotation>, std::int32_t>> cache_;
  std::map<std::pair<std::int64_t, std::int64_t>, bool> process_rule_;
  std::vector<Context> contexts_;
  std::vector<StringId> context_names_;
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> by_thread_;
  std::map<std::int32_t, std::vector<std::size_t>> by_rank_;
  std::vector<Placement> placed_;
  std::vector<std::int64_t> launch_t_;
  std::map<std::int32_t, std::vector<std::int64_t>> step_ends_;  // rank -> ends of its iteration_end ranges
  std::map<std::pair<std::int32_t, std::int64_t>, Placement> forward_;  // (rank, autograd sequence) -> forward op
  std::vector<std::optional<OpKind>> kind_;
  std::vector<std::optional<OpKind>> fallback_;  // kind of an activity no context covers
  std::vector<bool> pending_direction_;          // an MoE all-to-all whose direction comes by order
  std::vector<bool> loose_a2a_;                  // an all-to-all outside every MoE range
  std::vector<std::int32_t> instance_;
  std::unordered_map<std::int64_t, const KernelRule*> kernel_rule_cache_;
  int ambiguous_directions_ = 0;
  std::vector<const Collective*> host_calls_;  // collectives without correlation id, by (rank, start)
  std::vector<std::pair<std::int32_t, std::int64_t>> by_correlation_;  // (rank, correlation id) of t_.collectives
  bool host_calls_built_ = false;
};

}  // namespace

RecognitionStats recognize_moe(Trace& trace, const MoeRules& rules) {
  if (!trace.ops.empty()) {
    trace.recognition = RecognitionStats{};
    return trace.recognition;
  }
  trace.recognition = Recognizer(trace, rules).run();
  return trace.recognition;
}

}  // namespace moetrace::analyzer
