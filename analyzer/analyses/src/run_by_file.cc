#include "moetrace/analyzer/run_by_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/clock_align.h"
#include "moetrace/schema/error.h"
#include "parallel.h"
#include "moetrace/analyzer/run_parts.h"

namespace moetrace::analyzer {
namespace {


// The trace without what grows with its events. The load and placement
// tables are taken out too: every file may hold the run's whole tables, so
// they are joined and deduplicated as the files come in.
Trace summary_of(Trace& t) {
  Trace s;
  s.run = t.run;
  s.devices = std::move(t.devices);
  s.ranks = std::move(t.ranks);
  s.streams = std::move(t.streams);
  s.buffers = std::move(t.buffers);
  s.layers = std::move(t.layers);
  s.expert_load_origin = t.expert_load_origin;
  s.expert_load_by_rank = t.expert_load_by_rank;
  s.projection = t.projection;
  s.recognition = t.recognition;
  s.op_track_begin.assign(s.streams.size() + 1, 0);
  s.activity_track_begin.assign(s.streams.size() + 1, 0);
  return s;
}

// A part's stream and buffer ids as the union's.
void rename_ids(Analyses& a, const std::vector<std::pair<std::int32_t, std::int32_t>>& streams,
                std::int64_t buffer_base) {
  std::unordered_map<std::int32_t, std::int32_t> to(streams.begin(), streams.end());
  auto stream = [&](std::int32_t& id) {
    if (auto it = to.find(id); it != to.end()) id = it->second;
  };
  for (auto& x : a.launch_queue.idle) stream(x.stream);
  for (auto& x : a.launch_queue.queues) stream(x.stream);
  for (auto& p : a.critical_path)
    for (auto& e : p.events)
      if (e.stream >= 0) stream(e.stream);
  if (buffer_base != 0) {
    for (auto& b : a.memory.buffers) b.buffer = BufferId(b.buffer.value + buffer_base);
    for (auto& b : a.memory.bubbles) b.buffer = BufferId(b.buffer.value + buffer_base);
  }
}

// Pass 1: what crosses ranks, `advance` called once per file read.
struct CrossRanks {
  Trace run;  // the union without its events; run.files not yet set
  std::shared_ptr<RunFiles> files;
  detail::MergeIds ids;
  std::size_t parts = 0;
  std::vector<CollectiveCall> calls;  // by (key, rank), on each rank's own clock
  std::vector<CollectiveCallSize> call_sizes;  // of each of calls
  std::int64_t events = 0;            // in the files of the run
};

// `sizes_too`: the calls' sizes too (CrossRanks::call_sizes), for efficiency.
CrossRanks read_cross_ranks(const std::vector<std::string>& paths, const RunLoadOptions& options,
                            const LoadOptions& lo, bool sizes_too, const std::function<void()>& advance) {
  std::vector<detail::LoadedFile> files(paths.size());
  std::vector<std::vector<CollectiveCall>> calls_of(paths.size());
  std::vector<std::vector<CollectiveCallSize>> sizes_of(paths.size());
  std::vector<std::int64_t> events_of(paths.size(), 0);
  std::vector<ExpertLoad> load;
  std::vector<ExpertPlacement> placements;
  std::size_t load_kept = 0, placements_kept = 0;
  detail::parallel_for(
      paths.size(), options.threads,
      [&](std::size_t i) {
        try {
          Trace t = load_trace(paths[i], lo);
          calls_of[i] = collective_calls(t);
          if (sizes_too) sizes_of[i] = collective_call_sizes(t, calls_of[i]);
          events_of[i] = t.event_count();
          files[i].trace = summary_of(t);
          files[i].trace->expert_load = std::move(t.expert_load);
          files[i].trace->placements = std::move(t.placements);
        } catch (const std::exception& e) {
          files[i].error = e.what();
        }
      },
      [&](std::size_t i) {
        if (auto& t = files[i].trace) {
          load.insert(load.end(), t->expert_load.begin(), t->expert_load.end());
          placements.insert(placements.end(), t->placements.begin(), t->placements.end());
          std::vector<ExpertLoad>().swap(t->expert_load);
          std::vector<ExpertPlacement>().swap(t->placements);
          if (load.size() > 2 * load_kept + 4096) detail::dedupe_expert_load(load), load_kept = load.size();
          if (placements.size() > 2 * placements_kept + 4096)
            detail::dedupe_placements(placements), placements_kept = placements.size();
        }
        advance();
      });
  auto parts = detail::assemble_run(paths, files, options.align);
  CrossRanks out;
  std::vector<CollectiveCall> calls;
  std::vector<CollectiveCallSize> sizes;
  for (auto i : parts.loaded_index) {
    calls.insert(calls.end(), calls_of[i].begin(), calls_of[i].end());
    sizes.insert(sizes.end(), sizes_of[i].begin(), sizes_of[i].end());
    out.events += events_of[i];
  }
  files.clear();
  calls_of.clear();
  sizes_of.clear();
  std::vector<std::size_t> order(calls.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(calls[a].key, calls[a].rank) < std::tie(calls[b].key, calls[b].rank);
  });
  out.calls.reserve(order.size());
  if (sizes_too) out.call_sizes.reserve(order.size());
  for (auto k : order) {
    out.calls.push_back(calls[k]);
    if (sizes_too) out.call_sizes.push_back(sizes[k]);
  }

  out.parts = parts.parts.size();
  out.run = detail::merge_traces(std::move(parts.parts), out.ids);
  detail::finish_run(out.run, parts);
  detail::dedupe_expert_load(load);
  detail::dedupe_placements(placements);
  out.run.expert_load = std::move(load);
  out.run.placements = std::move(placements);
  out.files = std::move(parts.files);
  out.files->clocks = estimate_clock_alignment(out.calls, out.run.rank_ids(), out.run.run.start_ns);
  // Applied to each file as it is read again (pass 2), as load_run() would.
  out.files->clocks.applied = options.align;
  return out;
}

}  // namespace

RunOverview overview_run(const std::vector<std::string>& paths, const RunLoadOptions& options) {
  if (paths.size() < 2) {
    RunOverview one;
    one.trace = load_run(paths, options);
    one.events = one.trace.event_count();
    return one;
  }
  LoadOptions lo = options.load;
  lo.progress = nullptr;
  std::size_t done = 0;
  auto x = read_cross_ranks(paths, options, lo, false, [&] {
    ++done;
    if (options.progress)
      options.progress("reading the ranks", static_cast<double>(done) / static_cast<double>(paths.size()));
  });
  RunOverview out;
  out.trace = std::move(x.run);
  out.trace.files = std::move(x.files);
  out.events = x.events;
  return out;
}

RunAnalysis analyze_run_by_file(const std::vector<std::string>& paths, const RunLoadOptions& options,
                                const BreakdownOptions& breakdown, std::size_t max_cost_samples,
                                KernelSequenceOptions sequences) {
  sequences.window = breakdown.rank_window;
  if (paths.size() < 2) {
    RunAnalysis one;
    one.trace = load_run(paths, options);
    one.analyses = analyze(one.trace, {}, breakdown, options.threads);
    if (!(sequences == one.analyses.kernel_sequences.options))  // analyze() found them with its defaults
      one.analyses.kernel_sequences = frequent_kernel_sequences(one.trace, sequences);
    return one;
  }
  LoadOptions lo = options.load;
  lo.progress = nullptr;
  const double total = 2.0 * static_cast<double>(paths.size());
  std::size_t done = 0;
  auto advance = [&](std::string_view stage) {
    ++done;
    if (options.progress) options.progress(stage, 0.95 * static_cast<double>(done) / total);
  };

  auto cross = read_cross_ranks(paths, options, lo, true, [&] { advance("reading the ranks' collectives"); });
  const std::size_t n_parts = cross.parts;
  const detail::MergeIds& ids = cross.ids;
  RunAnalysis out;
  out.trace = std::move(cross.run);
  Trace& run = out.trace;
  auto& files_info = *cross.files;
  files_info.by_file = true;
  const bool several_ranks = run.rank_ids().size() > 1;
  Analyses& a = out.analyses;
  if (several_ranks) {
    if (options.align) apply_clock_alignment(cross.calls, files_info.clocks);
    a.rank_waits = compute_rank_waits(cross.calls);
  }
  // The collectives' efficiency, and each instance's participants in the
  // run for the parts' rows; then the calls go.
  EfficiencyAnalysis collectives;
  collective_efficiency(run, cross.calls, cross.call_sizes, collectives);
  std::unordered_map<std::uint64_t, int> participants;
  for (const auto& c : cross.calls) ++participants[c.key];
  std::vector<CollectiveCall>().swap(cross.calls);
  std::vector<CollectiveCallSize>().swap(cross.call_sizes);
  // The kernel sequences are one rank's: that rank's file finds them.
  sequences.rank = kernel_sequence_rank(run, sequences);
  std::optional<KernelSequenceAnalysis> kernel_sequences;

  // Pass 2: each file's own analyses, on the union's clock and run.
  std::vector<Analyses> analysed(n_parts);
  std::vector<CostSamples> samples(n_parts);
  std::size_t sampled = 0;  // ops sampled so far; above max_cost_samples the samples are dropped
  std::vector<bool> ended(n_parts, false);  // parts done (the calling thread's)
  std::map<std::string, UnclassifiedKernel> unclassified;
  const int per_file = std::max(1, detail::worker_count(options.threads) / static_cast<int>(std::max<std::size_t>(1, n_parts)));
  detail::parallel_for(
      n_parts, options.threads,
      [&](std::size_t p) {
        const auto& file = files_info.files[p];
        Trace t = load_trace(file.path, lo);
        std::vector<std::int32_t> ranks;
        for (RankId r : t.rank_ids()) ranks.push_back(r.value);
        if (ranks != file.ranks) throw Error(file.path + ": changed while the run was read; read it again");
        t.run = run.run;
        if (options.align) {
          ClockAlignment clocks = files_info.clocks;
          apply_clock_alignment(t, clocks);
        }
        auto part = analyze_file_part(t, breakdown, per_file);
        part.analyses.efficiency = analyze_efficiency(t, &participants);
        if (std::find(ranks.begin(), ranks.end(), *sequences.rank) != ranks.end())
          kernel_sequences = frequent_kernel_sequences(t, sequences);
        analysed[p] = std::move(part.analyses);
        samples[p] = std::move(part.cost_samples);
        rename_ids(analysed[p], ids.streams[p], ids.buffer_base[p]);
      },
      [&](std::size_t p) {
        for (auto& k : analysed[p].unclassified_kernels) {
          auto& sum = unclassified[k.name];
          if (sum.name.empty()) sum.name = std::move(k.name);
          sum.count += k.count;
          sum.gpu_ns += k.gpu_ns;
        }
        std::vector<UnclassifiedKernel>().swap(analysed[p].unclassified_kernels);
        // Beyond the bound every ended part's samples go (parts still being
        // analysed write theirs: each goes as it ends).
        sampled += samples[p].ops.size();
        ended[p] = true;
        if (sampled > max_cost_samples)
          for (std::size_t q = 0; q < n_parts; ++q)
            if (ended[q] && !samples[q].ops.empty()) samples[q] = CostSamples();
        advance("analysing the ranks");
      });

  if (options.progress) options.progress("merging the ranks' analyses", 0.95);
  std::vector<Breakdown> breakdowns;
  std::vector<MemoryAnalysis> memories;
  std::vector<LaunchQueueAnalysis> queues;
  std::vector<NvtxAnalysis> nvtx;
  std::vector<EfficiencyAnalysis> efficiencies;
  for (auto& p : analysed) {
    efficiencies.push_back(std::move(p.efficiency));
    breakdowns.push_back(std::move(p.breakdown));
    memories.push_back(std::move(p.memory));
    queues.push_back(std::move(p.launch_queue));
    nvtx.push_back(std::move(p.nvtx));
    for (auto& c : p.critical_path) a.critical_path.push_back(std::move(c));
    p = Analyses();
  }
  std::stable_sort(a.critical_path.begin(), a.critical_path.end(),
                   [](const RankCriticalPath& x, const RankCriticalPath& y) { return x.rank < y.rank; });
  a.breakdown = merge_breakdowns(std::move(breakdowns));
  a.memory = merge_memory(std::move(memories), run);
  a.launch_queue = merge_launch_queues(std::move(queues));
  a.nvtx = merge_nvtx(std::move(nvtx));
  if (run.recognition.ran) {
    // Every part's whole list, summed by name: largest_unclassified_kernels() of the union.
    std::vector<UnclassifiedKernel> all;
    for (auto& [name, k] : unclassified) all.push_back(std::move(k));
    a.unclassified_kernels = largest_first(std::move(all), kUnclassifiedKernelsShown);
  }
  if (sampled <= max_cost_samples)
    a.cost_model = fit_cost_samples(merge_cost_samples(std::move(samples)), run);
  else
    a.fits_not_computed_reason = fmt::format(
        "the run's {} files were analysed one at a time, in bounded memory, and their {} ops are more than the "
        "{} whose samples the fits keep (moetrace report --merged fits them)",
        n_parts, sampled, max_cost_samples);
  std::vector<CostSamples>().swap(samples);
  a.efficiency = merge_efficiency(std::move(efficiencies), run);
  a.efficiency.collectives = std::move(collectives.collectives);
  a.efficiency.wait_separated = collectives.wait_separated;
  a.expert_load = analyze_expert_load(run, a.breakdown);
  a.locality = analyze_locality(run);
  a.not_computed_reason = fmt::format(
      "the run's {} files were analysed one at a time, in bounded memory, and this needs every rank's events at "
      "once (moetrace report --merged reads them together)",
      n_parts);
  if (kernel_sequences) a.kernel_sequences = std::move(*kernel_sequences);
  run.files = std::move(cross.files);
  if (options.progress) options.progress("done", 1.0);
  return out;
}

}  // namespace moetrace::analyzer
