#include "moetrace/analyzer/run_loader.h"

#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "moetrace/schema/error.h"
#include "moetrace/analyzer/run_parts.h"

namespace moetrace::analyzer {
namespace {

// run.rank2.db before run.rank10.db.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie])) != 0) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je])) != 0) ++je;
      std::string_view x(a.data() + i, ie - i), y(b.data() + j, je - j);
      while (x.size() > 1 && x.front() == '0') x.remove_prefix(1);
      while (y.size() > 1 && y.front() == '0') y.remove_prefix(1);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

bool is_pattern(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string config_of(const RunInfo& r, std::string_view key) {
  for (const auto& [k, v] : r.config)
    if (k == key) return v;
  return {};
}

bool imported(const RunInfo& r) { return r.backend == "nsys" || r.backend == "kineto"; }

// Why `b` is not a rank of `a`'s run ("" where nothing says so). Traces we
// record carry their whole configuration; imports only their tool's world
// size; `run.id`, where both have one, decides.
std::string other_run(const RunInfo& a, const RunInfo& b) {
  const std::string ia = config_of(a, "run.id"), ib = config_of(b, "run.id");
  if (!ia.empty() && !ib.empty()) return ia == ib ? "" : fmt::format("run id {}, not {}", ib, ia);
  if (a.backend != b.backend) return fmt::format("backend {}, not {}", b.backend, a.backend);
  if (a.variant != b.variant) return fmt::format("variant {}, not {}", b.variant.empty() ? "-" : b.variant,
                                                 a.variant.empty() ? "-" : a.variant);
  if (a.world_size != b.world_size) return fmt::format("world size {}, not {}", b.world_size, a.world_size);
  if (!imported(a) && a.config_json != b.config_json) return "another configuration";
  return "";
}

std::vector<detail::LoadedFile> load_parallel(const std::vector<std::string>& paths, const RunLoadOptions& options) {
  std::vector<detail::LoadedFile> out(paths.size());
  LoadOptions lo = options.load;
  lo.progress = nullptr;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto workers = std::min<std::size_t>(paths.size(), options.threads > 0 ? static_cast<std::size_t>(options.threads) : cores);
  if (workers > 1 || options.threads == 1) lo.threads = 1;  // the files take the cores
  std::atomic<std::size_t> next{0};
  std::mutex m;
  std::condition_variable cv;
  std::size_t done = 0;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < paths.size();) {
      try {
        out[i].trace = load_trace(paths[i], lo);
      } catch (const std::exception& e) {
        out[i].error = e.what();
      }
      {
        std::lock_guard lock(m);
        ++done;
      }
      cv.notify_one();
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) threads.emplace_back(work);
  {
    std::unique_lock lock(m);
    while (done < paths.size()) {
      cv.wait(lock);
      if (options.progress) {
        const double f = static_cast<double>(done) / static_cast<double>(paths.size());
        lock.unlock();
        options.progress("loading files", 0.9 * f);
        lock.lock();
      }
    }
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

bool other_tool_trace_name(std::string_view name) {
  return name.ends_with(".json") || name.ends_with(".json.gz") || name.ends_with(".sqlite");
}

std::vector<std::string> expand_trace_paths(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& arg : args) {
    std::error_code ec;
    std::vector<std::string> found;
    if (fs::is_directory(arg, ec)) {
      for (const auto& e : fs::directory_iterator(arg, ec))
        if (e.path().extension() == ".db" && e.is_regular_file(ec)) found.push_back(e.path().string());
      // A folder of traces of other tools (a profiler's output folder):
      // their files, which the commands import first.
      if (found.empty())
        for (const auto& e : fs::directory_iterator(arg, ec)) {
          const auto name = e.path().filename().string();
          if (e.is_regular_file(ec) && other_tool_trace_name(name))
            found.push_back(e.path().string());
        }
      if (found.empty()) {  // the loader says it is a directory, not a trace
        out.push_back(arg);
        continue;
      }
    } else if (!fs::exists(arg, ec) && is_pattern(arg)) {
      glob_t g{};
      if (::glob(arg.c_str(), 0, nullptr, &g) == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) found.emplace_back(g.gl_pathv[i]);
      ::globfree(&g);
      if (found.empty()) throw Error(arg + ": no file matches");
    } else {
      out.push_back(arg);
      continue;
    }
    std::sort(found.begin(), found.end(), natural_less);
    out.insert(out.end(), found.begin(), found.end());
  }
  std::vector<std::string> unique;
  std::set<std::string> seen;
  for (auto& p : out) {
    std::error_code ec;
    if (seen.insert(fs::weakly_canonical(p, ec).string()).second) unique.push_back(std::move(p));
  }
  return unique;
}

std::vector<std::vector<std::string>> group_runs(const std::vector<std::string>& paths) {
  std::vector<std::vector<std::string>> groups;
  std::optional<RunInfo> current;
  for (const auto& p : paths) {
    std::optional<RunInfo> info;
    try {
      info = summarize_trace(p).run;
    } catch (const std::exception&) {
    }
    if (groups.empty() || (info && current && !other_run(*current, *info).empty())) {
      groups.emplace_back();
      current.reset();
    }
    if (info && !current) current = info;
    groups.back().push_back(p);
  }
  return groups;
}

std::string rank_ranges(const std::vector<std::int32_t>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + (j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return out;
}

std::string describe_paths(const std::vector<std::string>& paths) {
  if (paths.empty()) return "";
  if (paths.size() == 1) return paths.front();
  if (paths.size() == 2) return paths.front() + " " + paths.back();
  return fmt::format("{} ... {} ({} files)", paths.front(), paths.back(), paths.size());
}

std::vector<std::string> RunFiles::warnings() const {
  std::vector<std::string> w;
  for (const auto& [path, why] : left_out) w.push_back(why + "; left out, the other files are analysed");
  if (by_file)
    w.push_back(fmt::format(
        "the {} files were analysed one at a time, in bounded memory: the critical path across ranks and the "
        "recommendations need every rank's events at once and are not computed (--merged reads them together)",
        files.size()));
  if (!missing_ranks.empty())
    w.push_back(fmt::format("rank{} {} of {} missing: no file given holds {}", missing_ranks.size() == 1 ? "" : "s",
                            rank_ranges(missing_ranks), world_size, missing_ranks.size() == 1 ? "it" : "them"));
  std::vector<std::int32_t> unaligned, uncertain;
  for (const auto& r : clocks.ranks) {
    if (r.rank == clocks.reference_rank) continue;  // the reference: nothing to align it with
    if (!r.estimated) unaligned.push_back(r.rank);
    else if (!r.usable()) uncertain.push_back(r.rank);
  }
  if (align_requested && !unaligned.empty())
    w.push_back(fmt::format("rank{} {}: no collective shared with rank {}; clock not aligned",
                            unaligned.size() == 1 ? "" : "s", rank_ranges(unaligned), clocks.reference_rank));
  if (align_requested && !uncertain.empty()) {
    // One line per refused rank, each with its reason; many ranks: the first
    // few, then a count.
    constexpr std::size_t kListed = 4;
    for (std::size_t i = 0; i < uncertain.size() && i < kListed; ++i) {
      const auto& r = *std::find_if(clocks.ranks.begin(), clocks.ranks.end(),
                                    [&](const RankClock& c) { return c.rank == uncertain[i]; });
      w.push_back(fmt::format("rank {}: clock not aligned against rank {}: {}", r.rank, clocks.reference_rank,
                              r.refused));
    }
    if (uncertain.size() > kListed)
      w.push_back(fmt::format("{} more ranks' clocks not aligned (moetrace info lists why)",
                              uncertain.size() - kListed));
  }
  return w;
}

namespace detail {

RunParts assemble_run(const std::vector<std::string>& paths, std::vector<LoadedFile>& loaded, bool align) {
  RunParts out;
  auto& files = out.files = std::make_shared<RunFiles>();
  files->align_requested = align;
  // Which run: the one most files belong to (ties: the first file's).
  std::vector<std::size_t> ok;
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    if (loaded[i].trace) ok.push_back(i);
    else files->left_out.emplace_back(paths[i], loaded[i].error);
  }
  if (ok.empty()) throw Error(loaded.front().error);
  std::size_t run = ok.front(), best = 0;
  for (auto i : ok) {
    std::size_t n = 0;
    for (auto j : ok) n += other_run(loaded[i].trace->run, loaded[j].trace->run).empty() ? 1 : 0;
    if (n > best) best = n, run = i;
  }
  for (auto i : ok)
    if (auto why = other_run(loaded[run].trace->run, loaded[i].trace->run); !why.empty())
      throw Error(fmt::format("{}: a rank of another run ({} as in {}); give the files of one run", paths[i], why,
                              paths[run]));
  // Ranks: a rank held by an earlier file leaves the later file out.
  std::map<std::int32_t, std::size_t> owner;
  std::vector<std::pair<std::int32_t, std::size_t>> order;  // (first rank, index into loaded)
  std::vector<RunFiles::File> kept;
  std::set<std::int32_t> duplicates;
  for (auto i : ok) {
    const auto ranks = loaded[i].trace->rank_ids();
    std::vector<std::int32_t> clash;
    for (RankId r : ranks)
      if (auto it = owner.find(r.value); it != owner.end()) clash.push_back(r.value);
    if (!clash.empty()) {
      duplicates.insert(clash.begin(), clash.end());
      files->left_out.emplace_back(
          paths[i], fmt::format("{}: holds rank{} {}, which {} holds too", paths[i], clash.size() == 1 ? "" : "s",
                                rank_ranges(clash), paths[owner[clash.front()]]));
      loaded[i].trace.reset();
      continue;
    }
    RunFiles::File f{paths[i], {}};
    for (RankId r : ranks) {
      owner[r.value] = i;
      f.ranks.push_back(r.value);
    }
    order.emplace_back(f.ranks.empty() ? INT32_MAX : f.ranks.front(), kept.size());
    kept.push_back(std::move(f));
    out.loaded_index.push_back(i);
  }
  std::stable_sort(order.begin(), order.end());
  std::vector<std::size_t> index;
  for (auto [rank, k] : order) {
    files->files.push_back(std::move(kept[k]));
    index.push_back(out.loaded_index[k]);
  }
  out.loaded_index = std::move(index);
  for (auto i : out.loaded_index) {
    out.parts.push_back(std::move(*loaded[i].trace));
    loaded[i].trace.reset();
  }
  files->duplicate_ranks.assign(duplicates.begin(), duplicates.end());
  for (const auto& [rank, i] : owner) out.ranks.push_back(rank);
  return out;
}

void finish_run(Trace& trace, RunParts& parts) {
  auto& files = *parts.files;
  int world = trace.run.world_size;
  if (!parts.ranks.empty()) world = std::max(world, parts.ranks.back() + 1);
  trace.run.world_size = files.world_size = world;
  std::set<std::int32_t> held(parts.ranks.begin(), parts.ranks.end());
  for (std::int32_t r = 0; r < world; ++r)
    if (held.count(r) == 0) files.missing_ranks.push_back(r);
  std::vector<std::string> analysed;
  for (const auto& f : files.files) analysed.push_back(f.path);
  trace.run.path = describe_paths(analysed);
}

}  // namespace detail

Trace load_run(const std::vector<std::string>& paths, const RunLoadOptions& options) {
  if (paths.empty()) throw Error("no trace file given");
  if (paths.size() == 1) {
    LoadOptions lo = options.load;
    if (!lo.progress && options.progress) lo.progress = options.progress;
    if (options.threads == 1) lo.threads = 1;
    return load_trace(paths.front(), lo);
  }
  auto loaded = load_parallel(paths, options);
  auto parts = detail::assemble_run(paths, loaded, options.align);
  if (options.progress) options.progress("merging", 0.9);
  Trace trace = merge_traces(std::move(parts.parts));
  detail::finish_run(trace, parts);
  if (options.progress) options.progress("aligning clocks", 0.95);
  parts.files->clocks = estimate_clock_alignment(trace);
  if (options.align) apply_clock_alignment(trace, parts.files->clocks);
  trace.files = std::move(parts.files);
  if (options.progress) options.progress("done", 1.0);
  return trace;
}

void rename_trace_files(Trace& trace, const std::function<std::string(const std::string&)>& name_of) {
  if (!trace.files) {
    trace.run.path = name_of(trace.run.path);
    return;
  }
  for (auto& s : trace.run.file_states) s.path = name_of(s.path);
  auto files = std::make_shared<RunFiles>(*trace.files);
  std::vector<std::string> analysed;
  for (auto& f : files->files) analysed.push_back(f.path = name_of(f.path));
  for (auto& [path, why] : files->left_out) path = name_of(path);
  trace.run.path = describe_paths(analysed);
  trace.files = std::move(files);
}

}  // namespace moetrace::analyzer
