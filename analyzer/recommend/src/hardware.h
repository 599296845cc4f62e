// The hardware model the recommenders and the trace what-ifs run on
// (private to moetrace::recommend): the simulator's CostModel given by the
// user, fitted from the trace term by term, the one a simulated trace ran
// with, or a preset; and what the report says of where it came from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::analyzer::detail {

struct Hardware {
  HardwareModelInfo info;
  sim::CostModel model;
  // Fitted terms: their residuals' rms relative to their mean time (0: not
  // fitted, no uncertainty known).
  double expert_rel_sd = 0, a2a_rel_sd = 0;
};

// `h` with its expert GEMMs and its all-to-all slower by the given factors
// (1 + f): a corner of the fits' uncertainty.
Hardware scaled(const Hardware& h, double expert, double a2a);

// The terms of `m` the recommenders read, as the report prints them
// (schemas/recommendations.schema.json, hardware_model).
nlohmann::json hardware_terms(const sim::CostModel& m, int ranks);

// The fitted model as the simulator's CostModel, term by term (hardware.cc);
// nullopt where the trace measures neither the expert GEMMs nor the
// all-to-all at P.
std::optional<Hardware> fitted_hardware(const Trace& t, const CostModel& fits, int P, std::vector<std::string>& notes);

// The model of `o` (--cost-model), else the trace's fit, the model a
// simulated trace ran with, or the h100-nvlink-ib preset, in the order the
// options ask; `fits`: the trace's fit where already computed.
Hardware resolve_hardware(const Trace& t, const RecommendOptions& o, const CostModel* fits, int P,
                          std::vector<std::string>& notes);

}  // namespace moetrace::analyzer::detail
