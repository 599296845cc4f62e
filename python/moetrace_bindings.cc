// The compiled half of the Python module `moetrace` (python/moetrace/ is the
// other half): loading traces, importing them, and every analysis of a run as
// a table. A table goes to Python as a dict of columns, numbers as numpy
// arrays and text as lists, in the order the DataFrame shows them; the
// wrapper makes the DataFrame, so pandas stays out of C++. Loading and the
// analyses run without the GIL. moetrace::Error (and ConfigError) becomes
// moetrace.Error, a RuntimeError with the CLI's one-line message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cost_model_arg.h"
#include "table.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/analyzer/model_spec.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/row_fields.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/importers/import.h"
#include "moetrace/schema/error.h"

namespace py = pybind11;
namespace an = moetrace::analyzer;

namespace {

using moetrace::python::Table;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Column names of the categories: "<category>_ns" and "exclusive_<category>_ns".
struct CategoryColumns {
  std::array<std::string, moetrace::kNumCategories> total, exclusive;
  CategoryColumns() {
    for (int c = 0; c < moetrace::kNumCategories; ++c) {
      const std::string name(moetrace::category_name(static_cast<moetrace::Category>(c)));
      total[static_cast<std::size_t>(c)] = name + "_ns";
      exclusive[static_cast<std::size_t>(c)] = "exclusive_" + name + "_ns";
    }
  }
};
const CategoryColumns& category_columns() {
  static const CategoryColumns c;
  return c;
}

// The put(name, value) of row_fields.h for a table: a column each.
auto table_put(Table& t) {
  return [&t](std::string_view name, const auto& value) { t.put(name, value); };
}

// The report's TimeSplit (report.cc time_split_json), flat.
void put_split(Table& t, const an::TimeSplit& s) {
  an::put_split_totals(s, table_put(t));
  const auto& names = category_columns();
  for (std::size_t c = 0; c < names.total.size(); ++c) t.put(names.total[c], s.category_ns[c]);
  for (std::size_t c = 0; c < names.exclusive.size(); ++c) t.put(names.exclusive[c], s.exclusive_ns[c]);
}

const an::Stream* stream_of(const an::Trace& trace, const an::Activity& a) {
  return a.stream >= 0 && static_cast<std::size_t>(a.stream) < trace.streams.size()
             ? &trace.streams[static_cast<std::size_t>(a.stream)]
             : nullptr;
}

std::string_view activity_type_name(an::ActivityType type) {
  switch (type) {
    case an::ActivityType::kMemcpy: return "memcpy";
    case an::ActivityType::kMemset: return "memset";
    case an::ActivityType::kKernel: break;
  }
  return "kernel";
}

// A kernel's name; "memcpy" or "memset" for the others.
std::string_view gpu_event_name(const an::Trace& trace, const an::Activity& a) {
  return a.type == an::ActivityType::kKernel ? trace.str(a.name) : activity_type_name(a.type);
}

// The key columns of the per-stream tables (row_fields.h).
void put_stream(Table& t, std::int32_t rank, std::int32_t stream, std::int64_t native_stream) {
  an::put_stream_key(rank, stream, native_stream, table_put(t));
}

// A window name of report --window; ConfigError for another.
an::RankWindow rank_window(const std::string& window) {
  const auto w = an::parse_rank_window(window);
  if (!w) throw moetrace::ConfigError("window \"" + window + "\" is not one of span, steps, steps-but-last, hta");
  return *w;
}

an::LaunchQueueOptions launch_options(std::int64_t consecutive_kernel_delay_ns, std::int64_t runtime_cutoff_ns,
                                      std::int64_t launch_delay_cutoff_ns, std::int32_t max_queue_length,
                                      const std::string& window) {
  an::LaunchQueueOptions o;
  o.window = rank_window(window);
  o.consecutive_kernel_delay_ns = consecutive_kernel_delay_ns;
  o.runtime_cutoff_ns = runtime_cutoff_ns;
  o.launch_delay_cutoff_ns = launch_delay_cutoff_ns;
  o.max_queue_length = max_queue_length;
  return o;
}

// One loaded run and the analyses computed on it so far. The methods run
// without the GIL; `mu_` makes two Python threads share one computation.
class Run {
 public:
  explicit Run(an::Trace trace) : trace_(std::move(trace)) {}

  const an::Trace& trace() const { return trace_; }

  const an::Breakdown& breakdown(an::RankWindow w) {
    std::lock_guard lock(mu_);
    auto& b = breakdowns_.at(static_cast<std::size_t>(w));
    if (!b) {
      an::BreakdownOptions o;
      o.rank_window = w;
      b = an::compute_breakdown(trace_, o);
    }
    return *b;
  }

  const an::Analyses& analyses() {
    std::lock_guard lock(mu_);
    if (!analyses_) analyses_ = an::analyze(trace_);
    return *analyses_;
  }

  std::vector<std::string> warnings() const {
    auto w = an::run_warnings(trace_.run);
    if (trace_.files)
      for (auto& line : trace_.files->warnings()) w.push_back(std::move(line));
    return w;
  }

  Table breakdown_table(const std::string& by, const std::string& window) {
    const auto w = rank_window(window);
    Table t;
    if (by == "rank") {
      for (const auto& r : breakdown(w).ranks) {
        t.put("rank", r.rank);
        put_split(t, r.t);
        t.put("unattributed_ns", r.unattributed_ns);
        t.put("events", r.events);
        t.end_row();
      }
    } else if (by == "iteration") {
      for (const auto& r : breakdown(w).iterations) {
        t.put("rank", r.rank);
        t.put("iteration", r.iteration);
        put_split(t, r.t);
        t.put("moe_layer_ns", r.moe_layer_ns);
        t.put("moe_share", r.moe_share());
        t.end_row();
      }
    } else if (by == "layer") {
      for (const auto& r : breakdown(w).rows) {
        t.put("rank", r.rank);
        t.put("layer", r.layer);
        t.put("iteration", r.iteration);
        t.put("phase", moetrace::phase_name(r.phase));
        put_split(t, r.t);
        t.end_row();
      }
    } else {
      throw moetrace::ConfigError("by=\"" + by + "\" is not one of rank, iteration, layer");
    }
    return t;
  }

  Table layers_table() {
    const auto& b = breakdown(an::RankWindow::kSpan);
    Table t;
    for (const auto& l : b.layers) {
      const an::Layer* shape = nullptr;
      for (const auto& s : trace_.layers)
        if (s.layer == l.layer) shape = &s;
      t.put("layer", l.layer);
      t.put("kind", shape ? shape->kind : std::string());
      t.put("num_experts", shape ? shape->num_experts : -1);
      t.put("top_k", shape ? shape->top_k : -1);
      t.put("model_dim", shape ? shape->model_dim : -1);
      t.put("hidden_dim", shape ? shape->hidden_dim : -1);
      t.put("ranks", l.ranks);
      t.put("iterations", l.iterations);
      t.put("mean_window_ns", l.mean_window_ns);
      t.put("max_window_ns", l.max_window_ns);
      t.put("slowest_rank", l.slowest_rank);
      t.put("forward_window_ns", l.forward.window_ns);
      if (!b.forward_only()) t.put("backward_window_ns", l.backward.window_ns);
      put_split(t, l.total);
      t.end_row();
    }
    return t;
  }

  Table kernels_table() {
    const auto& tr = trace_;
    Table t;
    for (const auto& a : tr.activities) {
      const an::OpRange* op =
          a.op >= 0 && static_cast<std::size_t>(a.op) < tr.ops.size() ? &tr.ops[static_cast<std::size_t>(a.op)] : nullptr;
      const auto* stream = stream_of(tr, a);
      put_stream(t, a.rank.value, stream ? stream->id.value : -1, stream ? stream->native_id : -1);
      t.put("stream_role", stream ? std::string_view(stream->role) : std::string_view());
      t.put("type", activity_type_name(a.type));
      t.put("name", gpu_event_name(tr, a));
      t.put("start_ns", a.start_ns);
      t.put("end_ns", a.end_ns);
      t.put("duration_ns", a.duration());
      t.put("category", moetrace::category_name(op ? moetrace::op_category(op->kind) : an::classify_activity(tr, a)));
      t.put("op", op ? moetrace::op_kind_name(op->kind) : std::string_view());
      t.put("layer", op ? op->layer : -1);
      t.put("iteration", op ? op->iteration : -1);
      t.put("micro_batch", op ? op->micro_batch : -1);
      t.put("phase", op ? moetrace::phase_name(op->phase) : std::string_view());
      t.put("correlation_id", a.correlation_id);
      t.put("bytes", a.bytes);
      t.end_row();
    }
    return t;
  }

  // critical_path.h: per (rank, category), or the path events of each rank;
  // across: the one path across ranks (rank -1 in the summary rows, each
  // event's rank in the event rows).
  // annotation: "" the whole trace, else HTA's window (instances [first, last]).
  Table critical_path_table(std::optional<std::int32_t> rank, bool events, std::size_t top_events, bool across,
                            const std::string& annotation, std::int32_t first, std::int32_t last) {
    an::CriticalPathOptions o;
    o.rank = rank;
    o.top_events = top_events;
    o.annotation = annotation;
    o.instance_first = first;
    o.instance_last = last;
    Table t;
    std::vector<an::RankCriticalPath> paths;
    if (across) {
      auto x = an::critical_path_across_ranks(trace_, top_events);
      if (x.path.nodes > 0) paths.push_back(std::move(x.path));
    } else {
      paths = an::critical_paths(trace_, o);
    }
    for (const auto& r : paths) {
      if (!events) {
        for (int c = 0; c < an::kNumPathCategories; ++c) {
          const auto cat = static_cast<an::PathCategory>(c);
          t.put("rank", r.rank);
          t.put("category", an::path_category_name(cat));
          t.put("ns", r.at(cat));
          t.put("share", r.share(cat));
          t.put("length_ns", r.length_ns);
          t.put("window_start_ns", r.window_start_ns);
          t.put("window_end_ns", r.window_end_ns);
          t.end_row();
        }
        continue;
      }
      for (const auto& e : r.events) {
        t.put("rank", across ? e.rank : r.rank);
        an::put_path_event(e, table_put(t));
        t.end_row();
      }
    }
    return t;
  }

  Table idle_table(std::int64_t consecutive_kernel_delay_ns, const std::string& window) {
    auto o = launch_options(consecutive_kernel_delay_ns, 50'000, 100'000, 1024, window);
    Table t;
    for (const auto& s : an::idle_time_breakdown(trace_, o))
      for (int c = 0; c < an::kNumIdleCategories; ++c) {
        const auto cat = static_cast<an::IdleCategory>(c);
        put_stream(t, s.rank, s.stream, s.native_stream);
        an::put_idle_category(s, cat, table_put(t));
        t.put("stream_window_ns", s.window_ns);
        t.put("stream_idle_ns", s.idle_total_ns());
        t.put("events", s.events);
        t.end_row();
      }
    return t;
  }

  Table queue_table(bool summary, std::int32_t max_queue_length, const std::string& window) {
    auto o = launch_options(30, 50'000, 100'000, max_queue_length, window);
    o.series_points = 0;
    Table t;
    for (const auto& q : an::queue_lengths(trace_, o)) {
      if (summary) {
        put_stream(t, q.rank, q.stream, q.native_stream);
        an::put_queue_summary(q, table_put(t));
        t.end_row();
        continue;
      }
      for (const auto& p : q.series) {
        put_stream(t, q.rank, q.stream, q.native_stream);
        t.put("ts_ns", p.ts_ns);
        t.put("length", p.length);
        t.end_row();
      }
    }
    return t;
  }

  Table launch_table(bool summary, std::int64_t runtime_cutoff_ns, std::int64_t launch_delay_cutoff_ns,
                     const std::string& window) {
    auto o = launch_options(30, runtime_cutoff_ns, launch_delay_cutoff_ns, 1024, window);
    Table t;
    if (summary) {
      o.worst_launches = 0;
      for (const auto& r : an::launch_statistics(trace_, o)) {
        an::put_launch_counts(r, table_put(t));
        const std::pair<std::string_view, const an::Distribution*> dists[] = {
            {"cpu_duration", &r.cpu_duration_ns}, {"gpu_duration", &r.gpu_duration_ns},
            {"launch_delay", &r.launch_delay_ns}};
        for (const auto& [name, d] : dists) {
          const std::string n(name);
          t.put(n + "_mean_ns", d->mean);
          t.put(n + "_p50_ns", d->p50);
          t.put(n + "_p95_ns", d->p95);
          t.put(n + "_max_ns", d->max);
        }
        t.end_row();
      }
      return t;
    }
    for (const auto& k : an::kernel_launches(trace_, o)) {
      const auto& a = trace_.activities[k.activity];
      const auto* call = trace_.launching_call(a);
      t.put("rank", k.rank);
      const auto* stream = stream_of(trace_, a);
      t.put("stream", stream ? stream->native_id : -1);
      t.put("stream_id", stream ? stream->id.value : -1);
      t.put("correlation_id", k.correlation_id);
      t.put("name", gpu_event_name(trace_, a));
      t.put("launch_call", call ? trace_.str(call->name) : std::string_view());
      t.put("cpu_start_ns", call ? call->start_ns : -1);
      t.put("gpu_start_ns", a.start_ns);
      an::put_launch_times(k, table_put(t));
      t.put("short_kernel", k.short_kernel);
      t.put("runtime_outlier", k.runtime_outlier);
      t.put("launch_delay_outlier", k.launch_delay_outlier);
      t.end_row();
    }
    return t;
  }

  Table memory_table() {
    const auto m = an::memory_timeline(trace_);
    Table t;
    for (const auto& r : m.ranks)
      for (const auto& p : r.allocated) {
        t.put("rank", r.rank);
        t.put("ts_ns", p.ts_ns);
        t.put("time_ns", p.ts_ns - m.origin_ns);
        t.put("bytes", p.bytes);
        t.end_row();
      }
    return t;
  }

  // `tokens`: each row's tokens per expert, the list column that the
  // wrapper adds with the GIL.
  Table expert_load_table(std::vector<std::vector<std::int64_t>>& tokens) {
    const auto a = an::analyze_expert_load(trace_, breakdown(an::RankWindow::kSpan));
    Table t;
    for (const auto& r : a.rows) {
      t.put("layer", r.layer);
      t.put("iteration", r.iteration);
      t.put("total_tokens", r.total_tokens);
      t.put("experts", r.tokens_per_expert.size());
      t.put("heaviest_expert", r.heaviest_expert);
      t.put("expert_max_over_mean", r.expert_max_over_mean);
      t.put("expert_cv", r.expert_cv);
      t.put("busiest_rank", r.busiest_rank);
      t.put("device_max_over_mean_home", r.device_max_over_mean_home);
      t.put("device_max_over_mean", r.device_max_over_mean);
      t.put("balance_degree_home", r.balance_degree_home);
      t.put("balance_degree", r.balance_degree);
      t.put("rb", r.rb);
      t.put("has_placement", r.has_placement);
      t.put("copies", r.copies);
      t.put("slowest_rank", r.slowest_rank);
      t.put("slowest_window_ns", r.slowest_window_ns);
      t.put("mean_window_ns", r.mean_window_ns);
      t.put("imbalance_ns", r.imbalance_ns());
      t.put("busiest_expert_compute_ns", r.busiest_expert_compute_ns);
      t.put("mean_expert_compute_ns", r.mean_expert_compute_ns);
      t.end_row();
      tokens.push_back(r.tokens_per_expert);
    }
    return t;
  }

  // The options of recommend() and replay(): cost_model=, model= (read into
  // `spec`, which must outlive them) and tokens= (-1: not given), as
  // --cost-model, --model and --tokens.
  static an::RecommendOptions advice_options(const std::string& cost_model, const std::string& model_path,
                                             std::int64_t tokens, std::shared_ptr<const an::ModelSpec>& spec) {
    an::RecommendOptions ro;
    moetrace::cli::apply_cost_model_arg(cost_model, ro, "cost_model=");
    spec = moetrace::cli::apply_model_shape_arg(model_path, tokens, ro, "tokens=");
    return ro;
  }

  Table recommend_table(const std::string& model_path, std::int64_t tokens, const std::string& cost_model,
                        bool simulate) {
    std::shared_ptr<const an::ModelSpec> spec;
    auto ro = advice_options(cost_model, model_path, tokens, spec);
    ro.simulate = simulate;
    const auto rec = an::recommend(trace_, analyses(), ro);
    Table t;
    for (const auto& it : rec.items) {
      t.put("layer", it.layer);
      t.put("subject", it.subject);
      t.put("action", it.action);
      t.put("change", it.change);
      t.put("predicted_gain", it.gain_known ? it.predicted_gain : kNaN);
      t.put("gain_low", it.gain_interval ? it.gain_low : kNaN);
      t.put("gain_high", it.gain_interval ? it.gain_high : kNaN);
      t.put("evidence", it.evidence);
      t.end_row();
    }
    return t;
  }

  // Run.replay(): the trace replayed from its execution graph, with what-ifs
  // (graph_whatif.h), by iteration or by MoE layer.
  Table replay_table(const std::vector<std::string>& what_ifs, const std::string& cost_model, const std::string& by,
                     const std::string& model_path, std::int64_t tokens) {
    if (by != "iteration" && by != "layer")
      throw moetrace::ConfigError("replay: by=\"" + by + "\" is not one of iteration, layer");
    an::GraphWhatIfs w;
    for (const auto& kv : what_ifs) an::parse_graph_what_if(kv, w);
    std::shared_ptr<const an::ModelSpec> spec;
    const auto ro = advice_options(cost_model, model_path, tokens, spec);
    const auto r = an::replay_with_what_ifs(trace_, w, ro);
    const bool predicted = !w.empty();
    Table t;
    // A row's times after its key columns: the same for both tables.
    auto put_times = [&](const auto& row) {
      t.put("measured_ns", row.measured_ns);
      t.put("replayed_ns", row.replayed_ns);
      t.put("error", an::relative_error(row.measured_ns, row.replayed_ns));
      t.put("predicted_ns", predicted ? static_cast<double>(row.predicted_ns) : kNaN);
      t.end_row();
    };
    if (by == "iteration") {
      for (const auto& row : r.summary.iterations) {
        t.put("rank", row.rank);
        t.put("iteration", row.iteration);
        put_times(row);
      }
    } else {
      for (const auto& row : r.summary.layers) {
        t.put("layer", row.layer);
        t.put("windows", row.windows);
        put_times(row);
      }
    }
    return t;
  }

  // efficiency.h: the report's efficiency rows (by "layer" or "rank") and
  // collective buckets; unknown figures NaN (the JSON's null).
  const an::EfficiencyAnalysis& efficiency() {
    std::lock_guard lock(mu_);
    if (!efficiency_) efficiency_ = an::analyze_efficiency(trace_);
    return *efficiency_;
  }
  Table efficiency_table(const std::string& by) {
    if (by != "layer" && by != "rank") throw moetrace::ConfigError("by=\"" + by + "\" is not one of layer, rank");
    const auto& e = efficiency();
    auto nan_if = [](double v) { return v >= 0 ? v : kNaN; };
    Table t;
    for (const auto& r : by == "layer" ? e.layers : e.ranks) {
      t.put("rank", r.rank);
      if (by == "layer") t.put("layer", r.layer);
      const an::RankDevice* d = nullptr;
      for (const auto& x : e.devices)
        if (x.rank == r.rank) d = &x;
      t.put("device", d ? d->device : std::string());
      t.put("gpu", d && d->peaks ? std::string(d->peaks->name) : std::string());
      const auto& g = r.expert;
      t.put("expert_ops", g.ops);
      t.put("expert_ops_with_flops", g.ops_with_flops);
      t.put("expert_flops", nan_if(g.flops));
      t.put("expert_time_ns", g.time_ns);
      t.put("achieved_tflops", nan_if(g.achieved_tflops));
      t.put("peak_tflops", nan_if(g.peak_tflops));
      t.put("percent_of_peak", nan_if(g.percent_of_peak));
      for (const auto& [p, c] : {std::pair{"all_to_all_", &r.all_to_all}, std::pair{"all_reduce_", &r.all_reduce}}) {
        const std::string n(p);
        t.put(n + "ops", c->ops);
        t.put(n + "ops_with_bytes", c->ops_with_bytes);
        t.put(n + "bytes", nan_if(static_cast<double>(c->bytes)));
        t.put(n + "time_ns", c->time_ns);
        t.put(n + "group_size", nan_if(static_cast<double>(c->group_size)));
        t.put(n + "algbw_gbps", nan_if(c->algbw_gbps));
        t.put(n + "busbw_gbps", nan_if(c->busbw_gbps));
        t.put(n + "link_gbps", nan_if(c->link_gbps));
        t.put(n + "percent_of_link", nan_if(c->percent_of_link));
      }
      t.end_row();
    }
    return t;
  }
  Table collectives_table() {
    Table t;
    for (const auto& b : efficiency().collectives) {
      t.put("kind", b.kind);
      t.put("min_bytes", b.min_bytes >= 0 ? static_cast<double>(b.min_bytes) : kNaN);
      t.put("instances", b.instances);
      t.put("calls", b.calls);
      t.put("unpaired_calls", b.unpaired_calls);
      t.put("bytes", b.bytes);
      t.put("wait_total_ns", b.wait_total_ns);
      t.put("wait_median_ns", b.wait_median_ns);
      t.put("transfer_total_ns", b.transfer_total_ns);
      t.put("transfer_median_ns", b.transfer_median_ns);
      t.put("skew_total_ns", b.skew_total_ns);
      t.put("group_size", b.group_size > 0 ? static_cast<double>(b.group_size) : kNaN);
      t.put("busbw_gbps", b.busbw_gbps >= 0 ? b.busbw_gbps : kNaN);
      t.put("percent_of_link", b.percent_of_link >= 0 ? b.percent_of_link : kNaN);
      t.end_row();
    }
    return t;
  }

  // kernel_sequences.h: HTA's frequent CUDA kernel sequences, under HTA's
  // column names where it has them (its durations in us, its traces' unit).
  an::KernelSequenceAnalysis kernel_sequences(const std::string& op, std::int32_t min_pattern_len, std::size_t top_k,
                                              std::optional<std::int32_t> rank, const std::string& window) const {
    an::KernelSequenceOptions o;
    o.operator_name = op;
    o.min_pattern_len = min_pattern_len;
    o.top_k = top_k;
    o.rank = rank;
    o.window = rank_window(window);
    return an::frequent_kernel_sequences(trace_, o);
  }
  static Table kernel_sequences_table(const an::KernelSequenceAnalysis& k) {
    Table t;
    for (const auto& s : k.sequences) {
      t.put("pattern", s.pattern());
      t.put("count", s.count);
      t.put("GPU kernel duration (us)", static_cast<double>(s.gpu_kernel_duration_ns) / 1e3);
      t.put("CPU op duration (us)", static_cast<double>(s.cpu_op_duration_ns) / 1e3);
      t.put("rank", k.rank);
      t.put("operator", s.op);
      t.put("kernels", s.kernels.size());
      t.put("gpu_kernel_duration_ns", s.gpu_kernel_duration_ns);
      t.put("cpu_op_duration_ns", s.cpu_op_duration_ns);
      t.end_row();
    }
    return t;
  }

 private:
  an::Trace trace_;
  std::mutex mu_;
  // One a window, indexed by RankWindow (kHta is the last).
  std::array<std::optional<an::Breakdown>, static_cast<std::size_t>(an::RankWindow::kHta) + 1> breakdowns_;
  std::optional<an::Analyses> analyses_;
  std::optional<an::EfficiencyAnalysis> efficiency_;
};

// Runs `f` without the GIL and hands its table to Python.
template <class F>
py::dict table(F&& f) {
  std::optional<Table> t;
  {
    py::gil_scoped_release release;
    t.emplace(f());
  }
  return t->to_python();
}

py::dict run_info(const Run& r) {
  const auto& run = r.trace().run;
  std::vector<std::int64_t> ranks;
  for (const auto id : r.trace().rank_ids()) ranks.push_back(id.value);
  std::vector<std::string> files;
  if (r.trace().files)
    for (const auto& f : r.trace().files->files) files.push_back(f.path);
  else
    files.push_back(run.path);
  py::dict d;
  d["path"] = run.path;
  d["files"] = files;
  d["name"] = run.name;
  d["backend"] = run.backend;
  d["variant"] = run.variant;
  d["host"] = run.host;
  d["simulated"] = run.simulated;
  d["world_size"] = run.world_size;
  d["ranks"] = ranks;
  d["start_ns"] = run.start_ns;
  d["end_ns"] = run.end_ns;
  d["schema_version"] = run.schema_version;
  d["integrity"] = run.integrity;
  d["aligned"] = r.trace().files ? r.trace().files->aligned() : false;
  d["events"] = r.trace().event_count();
  return d;
}

std::shared_ptr<Run> open_run(const std::vector<std::string>& args, bool align, const std::string& moe_rules,
                              bool recognize) {
  py::gil_scoped_release release;
  an::RunLoadOptions o;
  o.load.moe_rules = moe_rules;
  o.load.recognize = recognize;
  o.align = align;
  // One file: load_trace() exactly, as `moetrace report` reads it; a trace
  // of another tool is read by its importer straight into memory.
  return std::make_shared<Run>(an::load_run(an::expand_trace_paths(args), o));
}

py::dict import_trace(const std::vector<std::string>& inputs, const std::string& output, const std::string& format) {
  moetrace::importers::ImportOptions o;
  const auto f = moetrace::importers::parse_format(format);
  if (!f) throw moetrace::ConfigError("format=\"" + format + "\" is not one of auto, nsys, kineto");
  o.format = *f;
  moetrace::importers::ImportSummary s;
  {
    py::gil_scoped_release release;
    s = moetrace::importers::import_traces(inputs, output, o);
  }
  py::dict d;
  d["output"] = s.output;
  d["format"] = std::string(moetrace::importers::format_name(s.format));
  d["ranks"] = s.ranks;
  d["world_size"] = s.world_size;
  d["rows"] = s.rows;
  d["skipped"] = s.skipped;
  d["warnings"] = an::unread_device_warnings(s.skipped);
  return d;
}

}  // namespace

PYBIND11_MODULE(_moetrace, m) {
  m.doc() = "moetrace's analyzer (the compiled half of the moetrace package; use `import moetrace`)";
  py::register_exception<moetrace::Error>(m, "Error", PyExc_RuntimeError);

  m.def("open", &open_run, py::arg("paths"), py::arg("align"), py::arg("moe_rules"), py::arg("recognize"));
  m.def("import_trace", &import_trace, py::arg("inputs"), py::arg("output"), py::arg("format"));
  m.def("categories", [] {
    std::vector<std::string> c;
    for (int i = 0; i < moetrace::kNumCategories; ++i)
      c.emplace_back(moetrace::category_name(static_cast<moetrace::Category>(i)));
    return c;
  });

  py::class_<Run, std::shared_ptr<Run>>(m, "Run")
      .def_property_readonly("info", &run_info)
      .def_property_readonly("warnings", &Run::warnings)
      .def("breakdown", [](Run& r, const std::string& by, const std::string& window) {
        return table([&] { return r.breakdown_table(by, window); });
      })
      .def("layers", [](Run& r) { return table([&] { return r.layers_table(); }); })
      .def("kernels", [](Run& r) { return table([&] { return r.kernels_table(); }); })
      .def("idle_breakdown", [](Run& r, std::int64_t delay, const std::string& window) {
        return table([&] { return r.idle_table(delay, window); });
      })
      .def("queue_length", [](Run& r, bool summary, std::int32_t max_queue_length, const std::string& window) {
        return table([&] { return r.queue_table(summary, max_queue_length, window); });
      })
      .def("launch_stats",
           [](Run& r, bool summary, std::int64_t runtime_cutoff, std::int64_t delay_cutoff, const std::string& window) {
             return table([&] { return r.launch_table(summary, runtime_cutoff, delay_cutoff, window); });
           })
      .def("critical_path",
           [](Run& r, std::optional<std::int32_t> rank, bool events, std::size_t top_events, bool across,
              const std::string& annotation, std::int32_t first, std::int32_t last) {
             return table([&] { return r.critical_path_table(rank, events, top_events, across, annotation, first, last); });
           })
      .def("efficiency", [](Run& r, const std::string& by) { return table([&] { return r.efficiency_table(by); }); })
      .def("efficiency_dtype", [](Run& r) {
        py::gil_scoped_release release;
        const auto& e = r.efficiency();
        py::gil_scoped_acquire acquire;
        py::dict d;
        d["dtype"] = std::string(an::peak_dtype_name(e.dtype));
        d["dtype_assumed"] = e.dtype_assumed;
        d["dtype_source"] = e.dtype_source;
        d["unmatched_devices"] = e.unmatched_devices;
        return d;
      })
      .def("collectives", [](Run& r) { return table([&] { return r.collectives_table(); }); })
      .def("kernel_sequences",
           [](Run& r, const std::string& op, std::int32_t min_pattern_len, std::size_t top_k,
              std::optional<std::int32_t> rank, const std::string& window) {
             an::KernelSequenceAnalysis k;
             auto d = table([&] {
               k = r.kernel_sequences(op, min_pattern_len, top_k, rank, window);
               return Run::kernel_sequences_table(k);
             });
             py::dict attrs;
             attrs["rank"] = k.rank;
             attrs["candidates"] = k.candidates;
             attrs["depth"] = k.depth;
             attrs["roots"] = k.roots;
             attrs["short_roots"] = k.short_roots;
             attrs["patterns"] = k.patterns;
             attrs["backward_linked"] = k.backward_linked;
             return py::make_tuple(d, attrs);
           })
      .def("memory_timeline", [](Run& r) { return table([&] { return r.memory_table(); }); })
      .def("expert_load", [](Run& r) {
        std::vector<std::vector<std::int64_t>> tokens;
        auto d = table([&] { return r.expert_load_table(tokens); });
        if (!tokens.empty()) d["tokens_per_expert"] = py::cast(tokens);
        return d;
      })
      .def("recommend", [](Run& r, const std::string& model, std::int64_t tokens, const std::string& cost_model,
                           bool simulate) {
        return table([&] { return r.recommend_table(model, tokens, cost_model, simulate); });
      })
      .def("replay", [](Run& r, const std::vector<std::string>& what_ifs, const std::string& cost_model,
                        const std::string& by, const std::string& model, std::int64_t tokens) {
        return table([&] { return r.replay_table(what_ifs, cost_model, by, model, tokens); });
      });
}
