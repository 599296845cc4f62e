// The pipeline-degree recommender against exhaustive search in the
// simulator on the pipemoe Table IV grid (issue 5, item 9).
//
// For every configuration P x B x L x H x M x E/P of Table IV (864; those
// whose simulated peak memory fits the RTX 2080 Ti's 11 GiB at every
// candidate r are "valid", the paper's 522 were those that ran), on the
// paper's hardware preset (pipemoe-2080ti-ib100: solver.py's alpha/beta):
//   - the recommended r: pipemoe Theorem 1's case split summed over the
//     forward and backward pass (analyzer choose_pipeline_degree) on the
//     preset's alpha/beta, r in [1, R];
//   - the simulated MoE-layer time (pipemoe Eq. 12 window, forward +
//     backward, slowest rank) of every r in [1, R]; the best is the minimum;
//   - regret = time(recommended) / time(best) - 1.
// Cost models: "serial" (the preset: one network resource, no interference;
// Theorem 1's case split is exact there) and "interference" (the same with
// computation at sigma_comm = 0.9 while communication runs and communication
// at mu_comp = 0.8 while computation runs, mpipemoe Sec. II-C: the closed
// form ignores both, so it is not exact).
//
// Usage: pipeline_degree_eval [--r-max 16] [--models serial,interference]
//                              [--csv FILE] [--limit N] [--full-plans]
// The what-ifs use the timing-only plan builder (kernels/sim timing_plan.h:
// op for op the plan of build_pipemoe, simulated to identical times, without
// per-peer transfers); --full-plans uses build_pipemoe itself (slower).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_args.h"
#include "moetrace/analyzer/pipeline_degree.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/fidelity/paper_rows.h"
#include "moetrace/sim/cost_model.h"

using namespace moetrace;

namespace {

struct Config {
  int P, B, L, H, M, l;
  std::string name() const { return fmt::format("pipemoe-t4-p{}-b{}-l{}-h{}-m{}-e{}", P, B, L, H, M, l); }
};

struct Outcome {
  Config c;
  bool valid = true;
  std::int64_t peak = 0;            // max over r
  std::vector<double> sim;          // [r-1]
  int best = 1;
  int rec = 1, rec_fwd = 1, rec_1248 = 1, best_1248 = 1;
  double regret = 0, regret_fwd = 0, regret_1248 = 0, regret_r2 = 0;
};

struct Summary {
  int n = 0, exact = 0, within3 = 0;
  double sum = 0, worst = 0;
  std::string worst_name;
  void add(double regret, const std::string& name) {
    ++n;
    if (regret <= 1e-9) ++exact;
    if (regret <= 0.03) ++within3;
    sum += regret;
    if (regret > worst) {
      worst = regret;
      worst_name = name;
    }
  }
  std::string line(const char* what) const {
    return fmt::format("  {:<44} {:>4} cfgs  best {:6.2f} %  within 3 % {:6.2f} %  mean regret {:6.3f} %  worst {:6.2f} % ({})",
                       what, n, 100.0 * exact / std::max(1, n), 100.0 * within3 / std::max(1, n),
                       100.0 * sum / std::max(1, n), 100.0 * worst, worst_name.empty() ? "-" : worst_name);
  }
};

sim::CostModel model_named(const std::string& name) {
  sim::CostModel m = sim::cost_model_preset("pipemoe-2080ti-ib100");
  if (name == "serial") return m;
  if (name == "interference") {
    m.name += "+interference";
    m.interference.sigma_comm = 0.9;
    m.interference.mu_comp = 0.8;
    return m;
  }
  if (name == "fair_share") {
    m.name += "+fair_share";
    m.link_sharing = sim::LinkSharing::kFairShare;
    return m;
  }
  std::fprintf(stderr, "pipeline_degree_eval: unknown model \"%s\" (serial, interference, fair_share)\n", name.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int r_max = 16, limit = 0;
  bool timing = true;
  std::string csv_path, models_arg = "serial,interference";
  for (bench::Args args("pipeline_degree_eval", argc, argv); args.next();) {
    const std::string& a = args.flag();
    if (a == "--r-max") r_max = std::stoi(args.value());
    else if (a == "--csv") csv_path = args.value();
    else if (a == "--models") models_arg = args.value();
    else if (a == "--limit") limit = std::stoi(args.value());
    else if (a == "--full-plans") timing = false;
    else {
      std::fprintf(stderr, "usage: pipeline_degree_eval [--r-max 16] [--models serial,interference,fair_share] "
                           "[--csv FILE] [--limit N] [--full-plans]\n");
      return 2;
    }
  }
  if (r_max < 8) {
    std::fprintf(stderr, "pipeline_degree_eval: --r-max must be at least 8\n");
    return 2;
  }
  std::vector<std::string> models;
  for (std::size_t p = 0; p <= models_arg.size();) {
    const auto q = std::min(models_arg.find(',', p), models_arg.size());
    models.push_back(models_arg.substr(p, q - p));
    p = q + 1;
  }
  std::vector<Config> grid;
  for (const auto& g : fidelity::pipemoe_table4_grid()) grid.push_back({g.P, g.B, g.L, g.H, g.M, g.l});
  if (limit > 0 && static_cast<std::size_t>(limit) < grid.size()) {
    // An even sample of the grid.
    std::vector<Config> sample;
    for (int i = 0; i < limit; ++i) sample.push_back(grid[grid.size() * static_cast<std::size_t>(i) / static_cast<std::size_t>(limit)]);
    grid = sample;
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "model,config,valid,peak_bytes,best_r,recommended_r,regret,forward_only_r,regret_forward_only,"
           "best_r_1248,recommended_r_1248,regret_1248,regret_fixed_r2";
    for (int r = 1; r <= r_max; ++r) csv << ",t_r" << r;
    csv << "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::printf("pipemoe Table IV grid: %zu configurations, r in [1, %d], hardware preset pipemoe-2080ti-ib100\n",
              grid.size(), r_max);
  std::printf("valid: simulated peak memory of every rank <= 11 GiB at every r (model states with Adam, "
              "activations, temporaries)\n");
  for (const auto& model_name : models) {
    const sim::CostModel model = model_named(model_name);
    std::vector<Outcome> out;
    out.reserve(grid.size());
    for (std::size_t i = 0; i < grid.size(); ++i) {
      const Config& c = grid[i];
      if (tty)
        std::fprintf(stderr, "\r\033[K%s: %zu/%zu %s", model_name.c_str(), i + 1, grid.size(), c.name().c_str());
      Outcome o;
      o.c = c;
      analyzer::MoeLayerWorkload w;
      w.ranks = c.P;
      w.experts = c.P * c.l;
      w.top_k = 2;  // solver.py: experts_per_token = 2
      w.model_dim = c.M;
      w.hidden = c.H;
      w.elem_bytes = 4;  // FP32, solver.py's NBYTES_PER_ELEMENT
      w.routing = analyzer::balanced_routing(w.ranks, w.experts, w.top_k, static_cast<std::int64_t>(c.B) * c.L);
      const auto choice = analyzer::choose_pipeline_degree(analyzer::pipeline_terms(w, model), r_max);
      const auto choice_1248 =
          analyzer::choose_pipeline_degree(analyzer::pipeline_terms(w, model), r_max, {1, 2, 4, 8});
      o.rec = choice.r;
      o.rec_fwd = choice.forward.r;
      o.rec_1248 = choice_1248.r;
      for (int r = 1; r <= r_max; ++r) {
        analyzer::WhatIf what;
        what.variant = "pipemoe";
        what.partitions = r;
        what.timing_plan = timing;
        const auto res = analyzer::simulate_layer(w, model, what);
        if (!res.ok) {
          std::fprintf(stderr, "\n%s r=%d: %s\n", c.name().c_str(), r, res.error.c_str());
          return 1;
        }
        o.sim.push_back(res.layer_s());
        o.peak = std::max(o.peak, res.peak_bytes);
      }
      o.valid = o.peak <= (11LL << 30);
      o.best = static_cast<int>(std::min_element(o.sim.begin(), o.sim.end()) - o.sim.begin()) + 1;
      const double best_t = o.sim[static_cast<std::size_t>(o.best - 1)];
      auto t = [&](int r) { return o.sim[static_cast<std::size_t>(r - 1)]; };
      o.regret = t(o.rec) / best_t - 1;
      o.regret_fwd = t(o.rec_fwd) / best_t - 1;
      o.best_1248 = 1;
      for (int r : {2, 4, 8})
        if (t(r) < t(o.best_1248)) o.best_1248 = r;
      o.regret_1248 = t(o.rec_1248) / t(o.best_1248) - 1;
      o.regret_r2 = t(2) / best_t - 1;
      if (csv.is_open()) {
        csv << fmt::format("{},{},{},{},{},{},{:.6g},{},{:.6g},{},{},{:.6g},{:.6g}", model_name, c.name(), o.valid ? 1 : 0,
                           o.peak, o.best, o.rec, o.regret, o.rec_fwd, o.regret_fwd, o.best_1248, o.rec_1248,
                           o.regret_1248, o.regret_r2);
        for (double v : o.sim) csv << fmt::format(",{:.9g}", v);
        csv << "\n";
      }
      out.push_back(std::move(o));
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    Summary all, valid, fwd, set1248, fixed2;
    std::map<int, int> best_hist;
    for (const auto& o : out) {
      all.add(o.regret, o.c.name());
      if (!o.valid) continue;
      valid.add(o.regret, o.c.name());
      fwd.add(o.regret_fwd, o.c.name());
      set1248.add(o.regret_1248, o.c.name());
      fixed2.add(o.regret_r2, o.c.name());
      ++best_hist[o.best];
    }
    std::printf("\ncost model %s (%s link, sigma_comm %.2f, mu_comp %.2f):\n", model.name.c_str(),
                std::string(sim::link_sharing_name(model.link_sharing)).c_str(), model.interference.sigma_comm,
                model.interference.mu_comp);
    std::printf("%s\n", valid.line("valid, r in [1, R], fwd+bwd Theorem 1").c_str());
    std::printf("%s\n", all.line("all 864 (valid or not), same").c_str());
    std::printf("%s\n", fwd.line("valid, forward-only Theorem 1 (Alg. 1)").c_str());
    std::printf("%s\n", set1248.line("valid, within {1,2,4,8} (vs best of the set)").c_str());
    std::printf("%s\n", fixed2.line("valid, fixed r = 2 (baseline)").c_str());
    std::string hist;
    for (const auto& [r, n] : best_hist) hist += fmt::format(" r={}:{}", r, n);
    std::printf("  simulated best r over the valid configurations:%s\n", hist.c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n%.1f s\n", secs);
  return 0;
}
