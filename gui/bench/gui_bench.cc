// Benchmark of the timeline viewer: opens a trace the way
// moetrace-gui does (load_trace, then the timeline model with its
// level-of-detail pyramids), then drives a real TimelineView offscreen
// through pans at several zoom levels and a zoom sweep, timing per frame the
// draw-list preparation (the worker thread's part) and the paint (the GUI
// thread's part, widget render into an image: rows, labels, gutter, ruler).
//
//   gui_bench [--events N ...] [--trace PATH] [--dir DIR] [--keep]
//             [--size WxH] [--frames N] [--replay] [--open-only] [--stages [--repeat N]]
//
// Last, the analyses run again in the background as the GUI runs them, the
// timeline panned meanwhile: the frames while they run, and their time.
//
// --open-only: only open the trace (load_trace, the timeline model): its
// wall and CPU time and memory; no analyses, no frames.
//
// --stages: after opening, the analyses one after the other on one thread
// (analyze() with threads = 1, as `report --threads 1`), each one's wall and
// CPU time, the peak RSS after it (the first to raise it holds the peak)
// and its own peak over the RSS it started from (the heap trimmed and the
// peak reset before each);
// no frames. To find where the analyses' time and memory go. --repeat N:
// the staged analyses N times over, one table each, so that a change can be
// judged by the least time of each stage on a VM whose speed moves within
// minutes.
//
// --replay: then the trace's replay as View > Show replay computes it
// (compute_replay: execution graph, replayed trace, the replayed tracks),
// its time and memory, and frames with the replayed tracks shown.
//
// Without --trace it writes synthetic traces (moetrace_synthetic: 8 ranks,
// 8 MoE layers, r = 4, kernels with API calls) of N events first. Target: a
// 10 M-event trace pans and zooms with frames under 16 ms.
#include <QApplication>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <QImage>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/heap.h"
#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/format.h"
#include "moetrace/schema/stopwatch.h"
#include "moetrace/synthetic/synthetic_trace.h"
#include "timeline_view.h"
#include "trace_session.h"

namespace {

using namespace moetrace;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// CPU time of this thread, ms: what a frame costs, apart from the time the
// thread waits for a core on a shared machine.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// CPU time of the whole process, ms (work spread over threads).
double process_cpu_ms() { return process_cpu_seconds() * 1e3; }

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

// VmRSS / VmHWM of this process, MiB.
double proc_status_mib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::strlen(key))) / 1024.0;
  return -1;
}

// Resets this process's VmHWM to its RSS now (Linux: "5" written to
// /proc/self/clear_refs); false where it cannot.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

struct Stats {
  double median = 0, p95 = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))]; };
  return {at(0.5), at(0.95), v.back()};
}

struct Frames {
  std::vector<double> prepare, paint, prepare_cpu, paint_cpu;
};

void frame(gui::TimelineView& view, QImage& img, Frames& f) {
  auto t0 = Clock::now();
  double c0 = thread_cpu_ms();
  view.prepare_now();
  f.prepare.push_back(ms_since(t0));
  f.prepare_cpu.push_back(thread_cpu_ms() - c0);
  img.fill(Qt::white);
  t0 = Clock::now();
  c0 = thread_cpu_ms();
  view.render(&img);
  f.paint.push_back(ms_since(t0));
  f.paint_cpu.push_back(thread_cpu_ms() - c0);
}

void print_row(const char* what, const Frames& f) {
  auto cell = [](const std::vector<double>& v) {
    const auto s = stats(v);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f / %.1f / %.1f", s.median, s.p95, s.max);
    return std::string(buf);
  };
  std::vector<double> total(f.prepare.size()), total_cpu(f.prepare.size());
  for (std::size_t i = 0; i < total.size(); ++i) {
    total[i] = f.prepare[i] + f.paint[i];
    total_cpu[i] = f.prepare_cpu[i] + f.paint_cpu[i];
  }
  std::printf("| %s | %zu | %s | %s | %s | %s | %s |\n", what, f.prepare.size(), cell(f.prepare_cpu).c_str(),
              cell(f.paint_cpu).c_str(), cell(total_cpu).c_str(), cell(f.paint).c_str(), cell(total).c_str());
}

// One row of the table: `frames` frames panning across the middle of the
// trace [start, start + span) at 1/zoom of it, 10 % of the window per frame
// (A/D held).
void pan_row(gui::TimelineView& view, QImage& img, double start, double span, double zoom, int frames) {
  const double window = span / zoom;
  const int canvas_w = view.canvas_rect().width();
  Frames f;
  double t = start + span / 2 - window / 2 - frames / 2.0 * 0.1 * window;
  for (int i = 0; i < frames; ++i, t += 0.1 * window) {
    view.set_axis(gui::TimeAxis{t, window / canvas_w, canvas_w});
    frame(view, img, f);
  }
  char what[96];
  std::snprintf(what, sizeof what, "pan, window %s (1/%g of the trace)", gui::format_duration(window).c_str(), zoom);
  print_row(what, f);
}

// The replay (View > Show replay) and frames with its tracks shown.
void run_replay(gui::TimelineView& view, const std::shared_ptr<const gui::TimelineModel>& base, QImage& img,
                int frames) {
  const double rss0 = proc_status_mib("VmRSS:");
  const auto t0 = Clock::now();
  const double c0 = process_cpu_ms();
  const auto r = gui::compute_replay(base, {});
  const double wall_ms = ms_since(t0), cpu_ms = process_cpu_ms() - c0;
  if (!r.error.empty()) {
    std::printf("\n- replay: failed: %s\n", r.error.c_str());
    return;
  }
  std::printf("\n- replay (compute_replay, as the viewer runs it off the GUI thread): %.2f s wall, %.2f s CPU of the "
              "process; %lld graph "
              "points, %lld edges; worst iteration error %.2f %%; +%zu rows; RSS %.0f -> %.0f MiB (the replayed "
              "trace and the tracks' model; the graph is freed), peak %.0f MiB; timeline model with the tracks %.0f "
              "MiB\n\n",
              wall_ms / 1e3, cpu_ms / 1e3, static_cast<long long>(r.summary.nodes),
              static_cast<long long>(r.summary.edges), 100 * r.summary.max_iteration_error,
              r.model->rows().size() - base->rows().size(), rss0, proc_status_mib("VmRSS:"),
              proc_status_mib("VmHWM:"), static_cast<double>(r.model->memory_bytes()) / 1048576.0);
  view.swap_model(r.model);
  const double start = static_cast<double>(base->start_ns()), span = static_cast<double>(base->end_ns()) - start;
  std::printf("| view, replayed tracks shown | frames | prepare CPU | paint CPU | prepare + paint CPU | paint wall | "
              "prepare + paint wall |\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (double zoom : {1.0, 100.0, 1e4}) pan_row(view, img, start, span, zoom, frames);
}

int run(const std::string& path, int width, int height, int frames, bool replay, bool open_only, bool stages,
        int repeat) {
  const double rss0 = proc_status_mib("VmRSS:");
  auto t0 = Clock::now();
  double c0 = process_cpu_ms();
  auto loaded = gui::TraceSession::load(QStringList{QString::fromStdString(path)}, {});
  const double open_ms = ms_since(t0), open_cpu_ms = process_cpu_ms() - c0;
  const double rss_loaded = proc_status_mib("VmRSS:"), peak_loaded = proc_status_mib("VmHWM:");
  const auto& trace = *loaded->trace;
  const auto& model = *loaded->model;

  std::printf("\n### %s\n\n", std::filesystem::path(path).filename().c_str());
  std::printf("- events: %s (%zu activities, %zu op ranges, %zu API calls, %zu memory events), %zu ranks, %zu rows\n",
              gui::format_count(trace.event_count()).c_str(), trace.activities.size(), trace.ops.size(),
              trace.api_calls.size(), trace.memory_events.size(), model.groups().size(), model.rows().size());
  std::printf("- open: %.2f s = load_trace %.2f s + timeline model and pyramids %.2f s (%.2f M events/s loaded); "
              "CPU %.2f s = %.2f s + %.2f s (load average %.1f)\n",
              open_ms / 1e3, loaded->load_seconds, loaded->model_seconds,
              static_cast<double>(trace.event_count()) / loaded->load_seconds / 1e6, open_cpu_ms / 1e3,
              loaded->load_cpu_seconds, loaded->model_cpu_seconds, load_average());
  std::printf("- memory: RSS %.0f MiB after opening (%.0f MiB before; %.1f bytes/event), peak %.0f MiB; timeline model %.0f MiB\n",
              rss_loaded, rss0, (rss_loaded - rss0) * 1048576.0 / static_cast<double>(trace.event_count()),
              peak_loaded, static_cast<double>(model.memory_bytes()) / 1048576.0);
  if (open_only) return 0;
  for (int pass = 0; stages && pass < repeat; ++pass) {
    std::printf("\n| analysis (one thread, in analyze()'s order)%s | wall s | CPU s | peak RSS after, MiB | its own peak "
                "over the RSS before it, MiB |\n|---|---:|---:|---:|---:|\n",
                repeat > 1 ? (", run " + std::to_string(pass + 1) + " of " + std::to_string(repeat)).c_str() : "");
    auto t = Clock::now();
    double c = process_cpu_ms();
    double peak = proc_status_mib("VmHWM:"), rss_before = proc_status_mib("VmRSS:");
    const bool resets = reset_peak_rss();
    const auto a = analyzer::analyze(trace, [&](std::string_view stage, double fraction) {
      if (fraction <= 0.0) return;  // "analysing": the start
      const double hwm = proc_status_mib("VmHWM:");
      peak = std::max(peak, hwm);
      std::printf("| %.*s | %.2f | %.2f | %.0f | %s |\n", static_cast<int>(stage.size()), stage.data(),
                  ms_since(t) / 1e3, (process_cpu_ms() - c) / 1e3, peak,
                  resets ? std::to_string(static_cast<long long>(hwm - rss_before)).c_str() : "-");
#if defined(__GLIBC__)
      malloc_trim(0);  // what the stage freed, so that the next one's own peak does not stand on it
#endif
      rss_before = proc_status_mib("VmRSS:");
      reset_peak_rss();
      t = Clock::now();
      c = process_cpu_ms();
    }, {}, 1);
  }
  if (stages) return 0;
  t0 = Clock::now();
  c0 = process_cpu_ms();
  auto analyses = gui::TraceSession::analyse(*loaded);
  std::printf("- analyses (breakdown etc., in the background once open): %.2f s, CPU %.2f s; peak %.0f MiB\n",
              ms_since(t0) / 1e3, (process_cpu_ms() - c0) / 1e3, proc_status_mib("VmHWM:"));

  gui::TimelineView view;
  view.resize(width, height);
  view.set_model(loaded->model);
  QImage img(width, height, QImage::Format_ARGB32_Premultiplied);
  const double start = static_cast<double>(model.start_ns()), end = static_cast<double>(model.end_ns());
  const double span = end - start;
  const int canvas_w = view.canvas_rect().width();

  std::printf("\nFrames of %dx%d (canvas %d px wide), ms as median / p95 / max. Prepare runs on a worker thread, "
              "paint on the GUI thread; CPU is the thread's CPU time, wall includes waiting for a core "
              "(load average %.1f at the start).\n\n", width, height, canvas_w, load_average());
  std::printf("| view | frames | prepare CPU | paint CPU | prepare + paint CPU | paint wall | prepare + paint wall |\n"
              "|---|---:|---:|---:|---:|---:|---:|\n");
  for (double zoom : {1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6}) {
    if (span / zoom / canvas_w < gui::AxisLimits::kMinNsPerPx) break;
    pan_row(view, img, start, span, zoom, frames);
  }
  {
    Frames f;
    view.fit_all();
    frame(view, img, f);
    while (view.axis().ns_per_px > std::max(gui::AxisLimits::kMinNsPerPx, span / 1e6 / canvas_w)) {
      view.zoom_in();
      frame(view, img, f);
    }
    char what[96];
    std::snprintf(what, sizeof what, "zoom in from the whole trace to 1/10^6 (W held, x%.2f per frame)",
                  gui::TimelineView::kZoomStep);
    print_row(what, f);
  }
  {
    Frames f;
    view.fit_all();
    for (int i = 0; i < frames; ++i) {
      view.set_axis(view.axis());
      frame(view, img, f);
      QCoreApplication::processEvents();
    }
    print_row("whole trace, repeated", f);
  }
  {
    // The analyses once more, as the GUI runs them once a trace is open (in
    // the background: every core, at a lower priority than the GUI's
    // threads), the timeline panned meanwhile: its frames then.
    Frames f;
    std::atomic<bool> done{false};
    const auto ta = Clock::now();
    std::thread worker([&] {
      (void)gui::TraceSession::analyse(*loaded);
      done = true;
    });
    const double window = span / 100;
    for (double t = start; !done; t = t + 1.1 * window > end ? start : t + 0.1 * window) {
      view.set_axis(gui::TimeAxis{t, window / canvas_w, canvas_w});
      frame(view, img, f);
    }
    worker.join();
    char what[128];
    std::snprintf(what, sizeof what, "pan, window %s, while the analyses run (%.1f s)",
                  gui::format_duration(window).c_str(), ms_since(ta) / 1e3);
    print_row(what, f);
  }
  if (replay) run_replay(view, loaded->model, img, frames);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  moetrace::analyzer::huge_pages_for_new_blocks();  // as moetrace-gui
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  std::vector<std::int64_t> sizes;
  std::vector<std::string> traces;
  std::string dir = std::filesystem::temp_directory_path().string();
  bool keep = false, replay = false, open_only = false, stages = false;
  int width = 1920, height = 1080, frames = 40, repeat = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--events") && i + 1 < argc) sizes.push_back(std::stoll(argv[++i]));
    else if (!std::strcmp(argv[i], "--trace") && i + 1 < argc) traces.push_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else if (!std::strcmp(argv[i], "--replay")) replay = true;
    else if (!std::strcmp(argv[i], "--open-only")) open_only = true;
    else if (!std::strcmp(argv[i], "--stages")) stages = true;
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--frames") && i + 1 < argc) frames = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--size") && i + 1 < argc && std::sscanf(argv[i + 1], "%dx%d", &width, &height) == 2) ++i;
    else {
      std::fprintf(stderr,
                   "usage: gui_bench [--events N ...] [--trace PATH ...] [--dir DIR] [--keep] [--size WxH] [--frames N] "
                   "[--replay] [--open-only] [--stages [--repeat N]]\n");
      return 2;
    }
  }
  if (sizes.empty() && traces.empty()) sizes = {1'000'000, 10'000'000};
  QApplication app(argc, argv);
  std::printf("gui_bench on %s, %u hardware threads, huge pages %s (huge_pages.h: %s)\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), moetrace::analyzer::huge_pages_wanted() ? "asked for" : "not asked for",
              moetrace::analyzer::huge_pages_reason().c_str());
  try {
    for (const auto& t : traces) run(t, width, height, frames, replay, open_only, stages, repeat);
    for (const auto n : sizes) {
      synthetic::SyntheticConfig c;
      c.ranks = 8;
      c.layers = 8;
      c.chunks = 4;
      c.iterations = synthetic::iterations_for_events(c, n);
      const std::string path = dir + "/gui_bench_" + std::to_string(n) + ".db";
      if (!std::filesystem::exists(path) || !keep) {
        const auto w = synthetic::write_synthetic_trace(path, c);
        std::printf("\n(wrote %s: %lld events in %.1f s)\n", path.c_str(), static_cast<long long>(w.events), w.seconds);
      }
      run(path, width, height, frames, replay, open_only, stages, repeat);
      if (!keep) std::filesystem::remove(path);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gui_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
