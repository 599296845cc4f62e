#include "moetrace/analyzer/report.h"

#include <fmt/format.h>

#include <cmath>
#include <ostream>

namespace moetrace::analyzer {

std::string format_duration(std::int64_t ns) {
  const double v = static_cast<double>(ns);
  const double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:.3g} s", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g} ms", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g} us", v / 1e3);
  return fmt::format("{} ns", ns);
}

std::string format_bytes(std::int64_t bytes) {
  const double v = static_cast<double>(bytes);
  if (std::fabs(v) >= 1024.0 * 1024 * 1024) return fmt::format("{:.3g} GiB", v / (1024.0 * 1024 * 1024));
  if (std::fabs(v) >= 1024.0 * 1024) return fmt::format("{:.3g} MiB", v / (1024.0 * 1024));
  if (std::fabs(v) >= 1024.0) return fmt::format("{:.3g} KiB", v / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string format_percent(double fraction) { return fmt::format("{:.1f}%", fraction * 100.0); }

nlohmann::json run_json(const RunInfo& run) {
  nlohmann::json config = nlohmann::json::object();
  for (const auto& [k, v] : run.config) config[k] = v;
  return {
      {"path", run.path},
      {"name", run.name},
      {"backend", run.backend},
      {"variant", run.variant},
      {"simulated", run.simulated},
      {"world_size", run.world_size},
      {"host", run.host},
      {"moetrace_version", run.moetrace_version},
      {"schema_version", run.schema_version},
      {"finalized", run.finalized},
      {"start_ns", run.start_ns},
      {"end_ns", run.end_ns},
      {"dropped_records", run.dropped_records},
      {"config", config},
  };
}

nlohmann::json time_split_json(const TimeSplit& t) {
  nlohmann::json categories = nlohmann::json::object();
  nlohmann::json exclusive = nlohmann::json::object();
  for (int c = 0; c < kNumCategories; ++c) {
    const auto name = std::string(category_name(static_cast<Category>(c)));
    categories[name] = t.category_ns[static_cast<std::size_t>(c)];
    exclusive[name] = t.exclusive_ns[static_cast<std::size_t>(c)];
  }
  return {
      {"window_ns", t.window_ns},
      {"category_ns", categories},
      {"exclusive_ns", exclusive},
      {"busy_ns", t.busy_ns},
      {"idle_ns", t.idle_ns},
      {"comm_ns", t.comm_ns},
      {"comm_hidden_ns", t.comm_hidden_ns},
      {"comm_exposed_ns", t.comm_exposed_ns},
      {"all_to_all_share", t.all_to_all_share()},
      {"all_reduce_share", t.all_reduce_share()},
      {"hidden_fraction", t.hidden_fraction()},
  };
}

nlohmann::json breakdown_json(const Breakdown& b, const ReportOptions& options) {
  nlohmann::json j;
  j["has_op_ranges"] = b.has_op_ranges;
  j["summary"] = {
      {"iteration", time_split_json(b.iteration_total)},
      {"moe_layer", time_split_json(b.moe_total)},
      {"moe_share_of_iteration", b.moe_share_of_iteration()},
      {"all_to_all_share_of_moe", b.all_to_all_share_of_moe()},
      {"all_reduce_share_of_moe", b.all_reduce_share_of_moe()},
      {"all_to_all_share_of_iteration", b.all_to_all_share_of_iteration()},
      {"all_reduce_share_of_iteration", b.all_reduce_share_of_iteration()},
      {"iterations", b.iterations.size()},
  };
  auto& layers = j["layers"] = nlohmann::json::array();
  for (const auto& l : b.layers)
    layers.push_back({
        {"layer", l.layer},
        {"ranks", l.ranks},
        {"iterations", l.iterations},
        {"mean_window_ns", l.mean_window_ns},
        {"max_window_ns", l.max_window_ns},
        {"slowest_rank", l.slowest_rank},
        {"total", time_split_json(l.total)},
        {"forward", time_split_json(l.forward)},
        {"backward", time_split_json(l.backward)},
    });
  auto& ranks = j["ranks"] = nlohmann::json::array();
  for (const auto& r : b.ranks) {
    auto row = time_split_json(r.t);
    row["rank"] = r.rank;
    row["unattributed_ns"] = r.unattributed_ns;
    ranks.push_back(std::move(row));
  }
  if (options.per_iteration) {
    auto& its = j["iterations"] = nlohmann::json::array();
    for (const auto& it : b.iterations) {
      auto row = time_split_json(it.t);
      row["rank"] = it.rank;
      row["iteration"] = it.iteration;
      row["moe_layer_ns"] = it.moe_layer_ns;
      its.push_back(std::move(row));
    }
  }
  if (options.per_rank) {
    auto& rows = j["rows"] = nlohmann::json::array();
    for (const auto& r : b.rows) {
      auto row = time_split_json(r.t);
      row["rank"] = r.rank;
      row["layer"] = r.layer;
      row["iteration"] = r.iteration;
      row["phase"] = std::string(phase_name(r.phase));
      rows.push_back(std::move(row));
    }
  }
  return j;
}

nlohmann::json report_json(const Trace& trace, const Breakdown& b, const ReportOptions& options) {
  return {
      {"report_version", kReportVersion},
      {"run", run_json(trace.run)},
      {"breakdown", breakdown_json(b, options)},
  };
}

namespace {

void write_split_header(std::ostream& out, const char* first) {
  out << fmt::format("{:>8} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7}\n", first,
                     "time", "a2a", "allred", "comm", "expert", "gate", "other", "copy", "idle",
                     "hidden");
}

void write_split(std::ostream& out, const std::string& first, std::int64_t time, const TimeSplit& t) {
  auto pct = [&](std::int64_t ns) { return fmt::format("{:.1f}", 100.0 * ratio(ns, t.window_ns)); };
  out << fmt::format("{:>8} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7}\n", first,
                     format_duration(time), pct(t.at(Category::kAllToAll)),
                     pct(t.at(Category::kAllReduce)), pct(t.at(Category::kOtherComm)),
                     pct(t.at(Category::kExpertCompute)), pct(t.at(Category::kGating)),
                     pct(t.at(Category::kOtherCompute)), pct(t.at(Category::kMemcpy)),
                     pct(t.idle_ns), fmt::format("{:.1f}", 100.0 * t.hidden_fraction()));
}

}  // namespace

void write_text_report(std::ostream& out, const Trace& trace, const Breakdown& b,
                       const ReportOptions& options) {
  const auto& run = trace.run;
  out << "moetrace report: " << run.path << "\n";
  out << fmt::format("run: {}  backend {}{}  variant {}  {} rank{}{}\n",
                     run.name.empty() ? "(unnamed)" : run.name, run.backend,
                     run.simulated ? " (simulated)" : "", run.variant.empty() ? "-" : run.variant,
                     run.world_size, run.world_size == 1 ? "" : "s",
                     run.finalized ? "" : "  [not finalized: the writer did not close]");
  if (run.dropped_records > 0)
    out << fmt::format("warning: {} activity records were dropped while tracing; times may be "
                       "incomplete\n",
                       run.dropped_records);
  if (!b.has_op_ranges) {
    out << "\nThis trace has no MoE op ranges; activity classified by kernel name.\n";
  } else if (!b.iterations.empty()) {
    const auto n = static_cast<std::int64_t>(b.iterations.size());
    const auto& it = b.iteration_total;
    out << fmt::format(
        "\n{} iteration row{} (rank x iteration), mean iteration {}; MoE layers are {} of it\n",
        n, n == 1 ? "" : "s", format_duration(it.window_ns / n),
        format_percent(b.moe_share_of_iteration()));
    out << fmt::format("all-to-all: {} of MoE-layer time, {} of iteration time\n",
                       format_percent(b.all_to_all_share_of_moe()),
                       format_percent(b.all_to_all_share_of_iteration()));
    out << fmt::format("all-reduce: {} of MoE-layer time, {} of iteration time\n",
                       format_percent(b.all_reduce_share_of_moe()),
                       format_percent(b.all_reduce_share_of_iteration()));
    out << fmt::format("communication hidden by computation: {} ({} exposed per iteration)\n",
                       format_percent(it.hidden_fraction()),
                       format_duration(it.comm_exposed_ns / n));
  }
  if (!b.layers.empty()) {
    out << "\nPer MoE layer (time per rank and iteration, fwd+bwd; columns are % of that time;\n"
           "hidden is % of the layer's communication overlapped by computation):\n";
    write_split_header(out, "layer");
    for (const auto& l : b.layers) write_split(out, std::to_string(l.layer), l.mean_window_ns, l.total);
    for (const auto& l : b.layers)
      if (l.ranks > 1 && l.max_window_ns > l.mean_window_ns * 11 / 10)
        out << fmt::format("layer {}: slowest rank {} takes {} ({} above the mean)\n", l.layer,
                           l.slowest_rank, format_duration(l.max_window_ns),
                           format_percent(ratio(l.max_window_ns - l.mean_window_ns, l.mean_window_ns)));
  }
  out << "\nPer rank (whole run):\n";
  write_split_header(out, "rank");
  for (const auto& r : b.ranks) write_split(out, std::to_string(r.rank), r.t.window_ns, r.t);
  if (options.per_iteration) {
    out << "\nPer rank and iteration:\n";
    write_split_header(out, "rank/it");
    for (const auto& it : b.iterations)
      write_split(out, fmt::format("{}/{}", it.rank, it.iteration), it.t.window_ns, it.t);
  }
  if (options.per_rank) {
    out << "\nPer rank, layer, iteration and phase:\n";
    write_split_header(out, "r/l/i/p");
    for (const auto& r : b.rows)
      write_split(out, fmt::format("{}/{}/{}/{}", r.rank, r.layer, r.iteration, phase_name(r.phase)),
                  r.t.window_ns, r.t);
  }
}

}  // namespace moetrace::analyzer
