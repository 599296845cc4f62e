// Timeline geometry as plain functions: the mapping between trace time (ns)
// and pixels, zoom and pan that keep the point under the cursor fixed, and
// the ruler's ticks. No Qt here, so every rule is unit-tested without a window.
#pragma once

#include <string>
#include <vector>

namespace moetrace::gui {

// Maps trace time onto [0, width_px): x = (t - t0_ns) / ns_per_px.
// Doubles, not integers: zoomed in past 1 ns per pixel, positions are fractional.
struct TimeAxis {
  double t0_ns = 0;
  double ns_per_px = 1;
  int width_px = 1;

  double x(double t_ns) const { return (t_ns - t0_ns) / ns_per_px; }
  double t(double x_px) const { return t0_ns + x_px * ns_per_px; }
  double t1_ns() const { return t0_ns + ns_per_px * width_px; }
  double window_ns() const { return ns_per_px * width_px; }

  // The axis showing [t0, t1) across width_px pixels.
  static TimeAxis fit(double t0_ns, double t1_ns, int width_px);

  friend bool operator==(const TimeAxis&, const TimeAxis&) = default;
};

// Limits that keep an axis meaningful: no deeper than kMinNsPerPx (a
// nanosecond spans 100 px: enough to read any event) and no wider than a few
// times the trace, so the trace never shrinks to a line.
struct AxisLimits {
  double trace_start_ns = 0, trace_end_ns = 1;
  static constexpr double kMinNsPerPx = 0.01;
  static constexpr double kMaxWindowFactor = 4.0;
  // Margin that may show beyond either end of the trace, as a fraction of the window.
  static constexpr double kEdgeMargin = 0.5;
};

TimeAxis clamp_axis(TimeAxis a, const AxisLimits& limits);
// Zooms by `factor` (> 1 zooms in) keeping the time at anchor_x at anchor_x.
TimeAxis zoom_axis(const TimeAxis& a, double factor, double anchor_x, const AxisLimits& limits);
// Pans by dx_px pixels (> 0 moves the view later in time).
TimeAxis pan_axis(const TimeAxis& a, double dx_px, const AxisLimits& limits);

struct RulerTick {
  double x = 0;          // pixel position
  double t_ns = 0;       // time relative to the ruler origin
  bool major = false;    // majors carry labels
  std::string label;     // "1.5 ms"; empty for minor ticks
};

// Ticks on a 1-2-5 ladder so that labelled ticks are at least min_label_px
// apart; five minor ticks per major (four for a 2-step). Times are labelled
// relative to origin_ns (the trace start) with the unit of the step.
std::vector<RulerTick> ruler_ticks(const TimeAxis& a, double origin_ns, double min_label_px = 90);
// The major step the ruler picks, in ns (exposed for tests).
double ruler_step_ns(double ns_per_px, double min_label_px);

}  // namespace moetrace::gui
