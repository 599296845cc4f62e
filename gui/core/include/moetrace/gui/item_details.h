// What the details panel shows for a selected item, as key/value text: for a
// kernel or copy its name, time, bytes, launch configuration, the op that
// launched it with its MoE coordinates, and the API call that launched it
// (found by correlation id); for an op its coordinates, work and GPU time.
#pragma once

#include <string>
#include <vector>

#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

struct DetailField {
  std::string key, value;
  bool heading = false;  // a section title ("Launched by", "API call"); value empty
};

std::vector<DetailField> describe_item(const TimelineModel& model, ItemRef item);

// A timestamp relative to the trace start with nanosecond precision in the
// unit of its magnitude: "1.234567 ms".
std::string format_timestamp(double ns);

}  // namespace moetrace::gui
