// The fitted models as JSON: the report's and `moetrace fit --format fits`'
// form (schemas/fitted_models.schema.json) and back, and the simulator's
// condensed cost model (schemas/cost_model.schema.json) that `moetrace fit`
// writes (cost_model.h).
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
#include "moetrace/schema/error.h"
#include "op_intervals.h"
namespace moetrace::analyzer {

namespace {

nlohmann::json fit_json(const CostModelFit& f) {
  nlohmann::json j = {
      {"x", f.x},
      {"sample", f.sample},
      {"method", f.fit.method},
      {"alpha_s", f.fit.alpha},
      {"beta_s", f.fit.beta},
      {"r2", f.fit.r2},
      {"residual_rms_s", f.fit.residual_rms},
      {"points", f.fit.points},
      {"x_min", f.fit.x_min},
      {"x_max", f.fit.x_max},
      {"mean_time_s", f.fit.mean_time},
      {"op_kinds", f.op_kinds},
  };
  if (f.subject == "collective") {
    j["collective"] = f.kind;
    j["group_size"] = f.group_size;
  } else {
    j["op_kind"] = f.kind;
  }
  if (f.launch_fit.usable) {
    j["sim_alpha_per_launch_s"] = f.launch_fit.alpha_per_launch;
    j["sim_beta_s"] = f.launch_fit.beta;
  }
  return j;
}

CostModelFit fit_from_json(const nlohmann::json& j, const std::string& subject, const std::string& where) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.is_object() || !j.contains(key)) throw Error("fitted models: " + where + " lacks \"" + key + "\"");
    return j.at(key);
  };
  try {
    CostModelFit f;
    f.subject = subject;
    if (subject == "collective") {
      f.kind = need("collective").get<std::string>();
      f.group_size = need("group_size").get<int>();
    } else {
      f.kind = need("op_kind").get<std::string>();
    }
    f.x = need("x").get<std::string>();
    f.sample = j.value("sample", "all");
    f.fit.method = need("method").get<std::string>();
    f.fit.alpha = need("alpha_s").get<double>();
    f.fit.beta = need("beta_s").get<double>();
    f.fit.r2 = j.value("r2", 0.0);
    f.fit.residual_rms = j.value("residual_rms_s", 0.0);
    f.fit.points = j.value("points", 0);
    f.fit.x_min = j.value("x_min", 0.0);
    f.fit.x_max = j.value("x_max", 0.0);
    f.fit.mean_time = j.value("mean_time_s", 0.0);
    if (j.contains("op_kinds")) f.op_kinds = j.at("op_kinds").get<std::vector<std::string>>();
    if (j.contains("sim_alpha_per_launch_s")) {
      f.launch_fit.usable = true;
      f.launch_fit.alpha_per_launch = j.at("sim_alpha_per_launch_s").get<double>();
      f.launch_fit.beta = j.value("sim_beta_s", 0.0);
    }
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw Error("fitted models: " + where + ": " + e.what());
  }
}

}  // namespace

nlohmann::json fitted_models_json(const Trace& trace, const CostModel& model) {
  std::string device;
  for (const auto& d : trace.devices)
    if (!d.name.empty()) {
      device = d.name;
      break;
    }
  nlohmann::json j;
  j["cost_model_version"] = kCostModelVersion;
  j["source"] = {{"trace", trace.run.path},     {"backend", trace.run.backend},
                 {"variant", trace.run.variant}, {"simulated", trace.run.simulated},
                 {"world_size", trace.run.world_size}, {"device", device}};
  j["units"] = {{"time", "s"},
                {"compute_x", "flops"},
                {"collective_x", "bytes"},
                {"copy_x", "bytes"},
                {"all_to_all_x", model.all_to_all_volume}};
  auto& c = j["compute"] = nlohmann::json::array();
  for (const auto& f : model.compute) c.push_back(fit_json(f));
  auto& k = j["collectives"] = nlohmann::json::array();
  for (const auto& f : model.collectives) k.push_back(fit_json(f));
  auto& m = j["copies"] = nlohmann::json::array();
  for (const auto& f : model.copies) m.push_back(fit_json(f));
  auto& i = j["interference"] = nlohmann::json::array();
  for (const auto& f : model.interference)
    i.push_back({{"factor", f.factor},
                 {"target", f.target},
                 {"interferer", f.interferer},
                 {"value", f.value},
                 {"lone_ops", f.lone_ops},
                 {"overlapped_ops", f.overlapped_ops}});
  auto& h = j["host_issue"] = nlohmann::json::array();
  for (const auto& f : model.host_issue)
    h.push_back({{"op_kind", f.kind},
                 {"method", f.method},
                 {"alpha_s", f.alpha},
                 {"per_launch_s", f.per_launch},
                 {"points", f.points},
                 {"median_s", f.median}});
  return j;
}

CostModel fitted_models_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("fitted models: not a JSON object");
  if (!j.contains("cost_model_version") || !j.at("cost_model_version").is_number_integer())
    throw Error("fitted models: lacks \"cost_model_version\"");
  const int version = j.at("cost_model_version").get<int>();
  if (version > kCostModelVersion)
    throw Error("fitted models: version " + std::to_string(version) + " is newer than this moetrace reads (" +
                std::to_string(kCostModelVersion) + ")");
  CostModel m;
  if (j.contains("units") && j.at("units").is_object() && j.at("units").contains("all_to_all_x")) {
    const auto& x = j.at("units").at("all_to_all_x");
    if (!x.is_string() || (x != "max_send" && x != "max_recv" && x != "max_send_recv"))
      throw Error("fitted models: units.all_to_all_x must be \"max_send\", \"max_recv\" or \"max_send_recv\"");
    m.all_to_all_volume = x.get<std::string>();
  }
  auto list = [&](const char* key) {
    if (!j.contains(key)) return nlohmann::json::array();
    if (!j.at(key).is_array()) throw Error(std::string("fitted models: \"") + key + "\" is not an array");
    return j.at(key);
  };
  int n = 0;
  for (const auto& f : list("compute")) m.compute.push_back(fit_from_json(f, "compute", "compute[" + std::to_string(n++) + "]"));
  n = 0;
  for (const auto& f : list("collectives"))
    m.collectives.push_back(fit_from_json(f, "collective", "collectives[" + std::to_string(n++) + "]"));
  n = 0;
  for (const auto& f : list("copies")) m.copies.push_back(fit_from_json(f, "copy", "copies[" + std::to_string(n++) + "]"));
  n = 0;
  for (const auto& f : list("interference")) {
    const auto where = "interference[" + std::to_string(n++) + "]";
    try {
      InterferenceFactor x;
      x.factor = f.at("factor").get<std::string>();
      x.target = f.value("target", "");
      x.interferer = f.at("interferer").get<std::string>();
      x.value = f.at("value").get<double>();
      x.lone_ops = f.value("lone_ops", 0);
      x.overlapped_ops = f.value("overlapped_ops", 0);
      m.interference.push_back(x);
    } catch (const nlohmann::json::exception& e) {
      throw Error("fitted models: " + where + ": " + e.what());
    }
  }
  n = 0;
  for (const auto& f : list("host_issue")) {
    const auto where = "host_issue[" + std::to_string(n++) + "]";
    try {
      HostIssueFit x;
      x.kind = f.at("op_kind").get<std::string>();
      x.method = f.value("method", "median");
      x.alpha = f.at("alpha_s").get<double>();
      x.per_launch = f.value("per_launch_s", 0.0);
      x.points = f.value("points", 0);
      x.median = f.value("median_s", x.alpha);
      m.host_issue.push_back(x);
    } catch (const nlohmann::json::exception& e) {
      throw Error("fitted models: " + where + ": " + e.what());
    }
  }
  return m;
}

nlohmann::json sim_cost_model_json(const Trace& trace, const CostModel& model, std::string_view base) {
  std::vector<std::string> clamped;
  auto non_negative = [&](double v, const std::string& what) {
    if (v >= 0 && std::isfinite(v)) return v;
    clamped.push_back(what);
    return 0.0;
  };
  nlohmann::json j;
  std::string file = trace.run.path;
  if (auto slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
  j["name"] = "fitted:" + file;
  if (!base.empty()) j["base"] = std::string(base);

  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& f : model.compute) {
    if (!f.launch_fit.usable || !parse_op_kind(f.kind)) continue;
    const auto where = "compute_by_kind." + f.kind;
    const double alpha = non_negative(f.launch_fit.alpha_per_launch, where + ".alpha_s");
    const double beta = non_negative(f.launch_fit.beta, where + (f.x == "flops" ? ".seconds_per_flop" : ".seconds_per_byte"));
    // The unmeasured term is set to 0 so that it does not add a preset's cost.
    by_kind[f.kind] = {{"alpha_s", alpha},
                       {"seconds_per_flop", f.x == "flops" ? beta : 0.0},
                       {"seconds_per_byte", f.x == "bytes" ? beta : 0.0}};
  }
  if (!by_kind.empty()) j["compute_by_kind"] = by_kind;

  // Simulator collective kinds: plan::CollectiveKind names.
  std::map<std::string, std::vector<const CostModelFit*>> coll;
  for (const auto& f : model.collectives)
    if (f.fit.usable()) coll[f.kind == "all_to_all" ? "all_to_all_v" : f.kind].push_back(&f);
  if (!coll.empty()) {
    nlohmann::json c = nlohmann::json::object();
    for (auto& [kind, fits] : coll) {
      std::sort(fits.begin(), fits.end(), [](const CostModelFit* a, const CostModelFit* b) {
        return a->group_size < b->group_size;
      });
      nlohmann::json points = nlohmann::json::array();
      for (const auto* f : fits) {
        const auto where = fmt::format("collectives.{}[ranks={}]", kind, f->group_size);
        points.push_back({{"ranks", f->group_size},
                          {"alpha_s", non_negative(f->fit.alpha, where + ".alpha_s")},
                          {"beta_s", non_negative(f->fit.beta, where + ".beta_s")}});
      }
      c[kind] = points;
    }
    j["collectives"] = c;
    // x of the fits: the bytes a rank sends to the other ranks
    // (op_ranges.bytes), or the larger of those and what it receives from
    // them (op_recv_bytes) where the trace records both.
    j["all_to_all_volume"] = model.all_to_all_volume;
    j["all_to_all_counts_local"] = false;
  }

  nlohmann::json copy = nlohmann::json::object();
  for (const auto& f : model.copies) {
    const char* dir = f.kind == "offload" ? "d2h" : f.kind == "prefetch" ? "h2d" : f.kind == "memcpy" ? "d2d" : nullptr;
    if (!dir || !f.fit.usable()) continue;
    copy[dir] = {{"alpha_s", non_negative(f.fit.alpha, std::string("copy.") + dir + ".alpha_s")},
                 {"beta_s", non_negative(f.fit.beta, std::string("copy.") + dir + ".beta_s")}};
  }
  if (!copy.empty()) j["copy"] = copy;

  nlohmann::json inter = nlohmann::json::object();
  for (const auto& f : model.interference) {
    const auto name = f.factor + "_" + f.interferer;
    static constexpr const char* kSimFactors[] = {"sigma_comm", "sigma_mem", "sigma_all", "mu_comp", "mu_mem",
                                                  "mu_all",     "eta_comp",  "eta_comm",  "eta_all"};
    if (std::find(std::begin(kSimFactors), std::end(kSimFactors), name) != std::end(kSimFactors) && f.value > 0)
      inter[name] = f.value;
  }
  if (!inter.empty()) j["interference"] = inter;

  // The host's issue time of the kinds the trace measured; the other kinds
  // issue instantly, as in every preset (and so do kinds measured at 0).
  nlohmann::json host = nlohmann::json::object();
  for (const auto& f : model.host_issue)
    if (parse_op_kind(f.kind) && (f.alpha > 0 || f.per_launch > 0))
      host[f.kind] = {{"alpha_s", non_negative(f.alpha, "host_issue." + f.kind + ".alpha_s")},
                      {"per_launch_s", non_negative(f.per_launch, "host_issue." + f.kind + ".per_launch_s")}};
  if (!host.empty()) j["host_issue"] = host;

  std::string device;
  for (const auto& d : trace.devices)
    if (!d.name.empty()) {
      device = d.name;
      break;
    }
  std::string description = fmt::format(
      "Fitted by moetrace fit from {} (backend {}{}, world size {}{}): compute t = launches x alpha + "
      "beta x work per op kind, collectives t = alpha + beta x bytes sent per group size, copies per "
      "direction, interference factors where measurable, host issue time per op kind where the ops carry launch "
      "intervals; everything else from the {}.",
      trace.run.path, trace.run.backend, trace.run.variant.empty() ? "" : ", variant " + trace.run.variant,
      trace.run.world_size, device.empty() ? "" : ", device " + device,
      base.empty() ? "simulator's default preset" : "preset " + std::string(base));
  if (!clamped.empty()) {
    description += " Negative fits written as 0:";
    for (const auto& c : clamped) description += " " + c;
    description += ".";
  }
  j["description"] = description;
  return j;
}

}  // namespace moetrace::analyzer
