// `moetrace import FILE... -o OUT`: Nsight Systems SQLite exports or
// PyTorch-profiler (Kineto) JSON traces -> one moetrace trace, or with
// `-o DIR/` one trace per input file (the rank files of one run), several at
// once.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "commands.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/importers/import.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

namespace {

namespace fs = std::filesystem;

std::string summary_line(const std::vector<std::string>& inputs, const importers::ImportSummary& s) {
  std::int64_t events = 0;
  std::string tables;
  for (const auto& [table, n] : s.rows) {
    events += n;
    tables += fmt::format("{}{} {}", tables.empty() ? "" : ", ", n, table);
  }
  std::int64_t skipped = 0;
  for (const auto& [reason, n] : s.skipped) skipped += n;
  std::string line = fmt::format("imported {} {} file{} into {}: {} rank{}, {} events ({})", inputs.size(),
                                 importers::format_name(s.format), inputs.size() == 1 ? "" : "s", s.output,
                                 s.ranks, s.ranks == 1 ? "" : "s", events, tables);
  if (skipped > 0) line += fmt::format("; {} source records not imported (see `moetrace info`)", skipped);
  return line;
}

// The inputs with each folder replaced by its trace files, in name order.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!fs::is_directory(in, ec)) {
      out.push_back(in);
      continue;
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(in, ec))
      if (e.is_regular_file(ec) && analyzer::other_tool_trace_name(e.path().filename().string()))
        files.push_back(e.path().string());
    if (ec) throw Error(in + ": cannot list the folder: " + ec.message());
    if (files.empty()) throw Error(in + ": a folder without .json, .json.gz or .sqlite files");
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

// The trace an input becomes in the output folder: its name without the
// profilers' suffixes (rank3.pt.trace.json.gz -> rank3.db).
std::string output_name(const std::string& input) {
  std::string name = fs::path(input).filename().string();
  for (std::string_view suffix : {".gz", ".json", ".sqlite", ".pt.trace"})
    if (name.ends_with(suffix) && name.size() > suffix.size()) name.resize(name.size() - suffix.size());
  return name + ".db";
}

int default_jobs() {
  // One import per core, each parsing on one thread: an import writes its
  // rows on one thread once its file is parsed, so imports side by side keep
  // the cores busy where one import's threads would not (2 cores: 241 MB/s
  // with 2 jobs, 167 MB/s with 1; BENCHMARKS.md).
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// One trace per input in `folder`, `jobs` imports at a time. Failed inputs
// are reported and leave no trace; the others go on. Returns the number that
// failed.
int import_each(const std::vector<std::string>& inputs, const std::string& folder, int jobs, bool skip_existing,
                importers::ImportOptions options) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (!fs::is_directory(folder, ec)) throw Error(folder + ": cannot create the output folder");
  std::map<std::string, std::string> owner;  // output -> input
  std::vector<std::pair<std::string, std::string>> tasks;
  int skipped = 0;
  for (const auto& in : inputs) {
    const std::string out = (fs::path(folder) / output_name(in)).string();
    if (auto [it, fresh] = owner.emplace(out, in); !fresh)
      throw Error(in + " and " + it->second + " would both be imported into " + out + "; rename one");
    if (skip_existing && fs::exists(out, ec)) {
      ++skipped;
      continue;
    }
    tasks.emplace_back(in, out);
  }
  const int total = static_cast<int>(tasks.size());
  jobs = std::clamp(jobs, 1, std::max(1, total));
  if (options.threads == 0) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    options.threads = static_cast<int>(std::clamp(cores / static_cast<unsigned>(jobs), 1u, 4u));
  }
  options.progress = nullptr;  // one line per finished file instead
  std::atomic<int> next{0};
  std::mutex print;
  int done = 0, failed = 0;
  auto worker = [&] {
    for (int i = next++; i < total; i = next++) {
      const auto& [in, out] = tasks[static_cast<std::size_t>(i)];
      std::string line;
      bool ok = true;
      try {
        const auto s = importers::import_traces({in}, out, options);
        line = summary_line({in}, s);
        for (const auto& w : analyzer::unread_device_warnings(s.skipped)) line += "\nmoetrace: warning: " + w;
      } catch (const std::exception& e) {
        line = fmt::format("moetrace: {}", e.what());
        ok = false;
      }
      std::lock_guard lock(print);
      ++done;
      if (!ok) ++failed;
      std::cerr << fmt::format("[{}/{}] {}\n", done, total, line);
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < jobs; ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  std::cerr << fmt::format("{} of {} file{} imported into {}", total - failed, total, total == 1 ? "" : "s", folder);
  if (skipped > 0) std::cerr << fmt::format("; {} skipped, their trace already there", skipped);
  if (failed > 0) std::cerr << fmt::format("; {} failed (above), and left no trace", failed);
  std::cerr << "\n";
  return failed;
}

}  // namespace

void add_import_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> inputs;
    std::string output;
    std::string format = "auto";
    int threads = 0;
    int jobs = 0;
    bool skip_existing = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "import",
      "Convert Nsight Systems SQLite exports or PyTorch-profiler (Kineto) JSON traces into a "
      "moetrace trace (several files: several ranks of one run), or with -o FOLDER/ into one trace per file");
  cmd->add_option("inputs", opt->inputs,
                  "Input files: .sqlite (nsys export) or .json/.json.gz (Kineto); a folder stands for its "
                  ".sqlite, .json and .json.gz files")
      ->required();
  cmd->add_option("--output,-o", opt->output,
                  "Trace database to write (replaced if it exists); a folder (an existing one, or a name "
                  "ending in /) gets one trace per input, NAME.db for NAME.pt.trace.json.gz, NAME.json or "
                  "NAME.sqlite, which `moetrace report FOLDER` reads as one run")
      ->required();
  cmd->add_option("--format,-f", opt->format, "Input format: auto, nsys, kineto")
      ->check(CLI::IsMember({"auto", "nsys", "kineto"}))
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads,
                  "Threads that parse each Kineto file (default: the cores, at most 4; with -o FOLDER/, the "
                  "cores shared among the jobs)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--jobs,-j", opt->jobs,
                  "With -o FOLDER/: files imported at once (default: one per core); each holds its file's "
                  "records while it is imported (about the size of its JSON, at least 60 MB)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--skip-existing", opt->skip_existing,
                "With -o FOLDER/: leave out the inputs whose trace is already there (a rerun after a failure "
                "does only what is missing)");
  cmd->callback([opt] {
    importers::ImportOptions options;
    options.format = *importers::parse_format(opt->format);
    options.threads = opt->threads;
    const auto inputs = expand_inputs(opt->inputs);
    std::error_code ec;
    const bool folder = opt->output.ends_with("/") || fs::is_directory(opt->output, ec);
    if (folder) {
      if (import_each(inputs, opt->output, opt->jobs > 0 ? opt->jobs : default_jobs(), opt->skip_existing,
                      options) > 0)
        throw ExitStatus{1};
      return;
    }
    if (opt->jobs > 0 || opt->skip_existing)
      throw Error("--jobs and --skip-existing need an output folder (-o FOLDER/): one trace per input");
    Progress progress("importing");
    options.progress = progress.callback();
    const auto s = importers::import_traces(inputs, opt->output, options);
    std::cerr << summary_line(inputs, s) << "\n";
    for (const auto& w : analyzer::unread_device_warnings(s.skipped)) std::cerr << "moetrace: warning: " << w << "\n";
  });
}

}  // namespace moetrace::cli
