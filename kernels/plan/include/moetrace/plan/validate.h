// Structural checks of a plan (the execution rules of plan.h) and memory
// accounting in issue order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moetrace/plan/plan.h"

namespace moetrace::plan {

// Every violated rule, one line each; empty where the plan is well formed:
//  - dense ids; each op's stream belongs to its rank; buffers it touches too;
//  - dependencies point to earlier ops (so the graph is acyclic);
//  - every collective has exactly one op on every rank of its group, all with
//    the same kind, group and root; all-to-all sends and receives pair up row
//    for row, broadcast/reduce have their root, all-reduce views agree;
//  - views lie inside their buffers; copies move equal shapes;
//  - every non-persistent buffer an op touches is allocated once, by an op
//    that precedes every op touching it, and freed once, by an op that
//    follows every op touching it ("precedes": through dependencies and
//    stream order).
// Cost: linear in the plan plus one graph walk per buffer; meant for tests
// and for checking plans of moderate size.
std::vector<std::string> check_plan(const Plan& plan);

// Throws moetrace::Error with the first problem of check_plan().
void validate_plan(const Plan& plan);

// Peak over the plan's issue order (ops one after another) of the bytes of
// live buffers of `rank` that satisfy `filter` (device memory unless the
// filter says otherwise). Persistent buffers count from the start.
std::int64_t issue_order_peak_bytes(const Plan& plan, RankId rank,
                                    const std::function<bool(const Buffer&)>& filter);

}  // namespace moetrace::plan
