// Format detection and the import entry point: picks the format's folder and
// runs it against one shared TraceBuilder.
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "../kineto/kineto_importer.h"
#include "../nsys/nsys_importer.h"
#include "moetrace/importers/import.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"
#include "trace_builder.h"

namespace moetrace::importers {

std::string_view format_name(Format f) {
  switch (f) {
    case Format::kNsys: return "nsys";
    case Format::kKineto: return "kineto";
    case Format::kAuto: break;
  }
  return "auto";
}

std::optional<Format> parse_format(std::string_view name) {
  if (name == "nsys") return Format::kNsys;
  if (name == "kineto") return Format::kKineto;
  if (name == "auto") return Format::kAuto;
  return std::nullopt;
}

namespace {

// Why `path` is no file to read; "" where it is one.
std::string unreadable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return path + ": no such file";
  if (fs::is_directory(status)) return schema::folder_without_traces(path);
  if (!fs::is_regular_file(status)) return path + ": not a regular file";
  return {};
}

void check_readable(const std::string& path) {
  if (auto why = unreadable(path); !why.empty()) throw Error(why);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What a file's first bytes say it is: a format, or (format unset) the one
// line that says why it is none, a moetrace trace among them. Throws
// nothing, so that telling a moetrace trace from another tool's, as every
// load does, is no control flow by exception.
struct Probe {
  std::optional<Format> format;
  std::string why;
};

Probe probe(const std::string& path) {
  if (auto why = unreadable(path); !why.empty()) return {std::nullopt, std::move(why)};
  if (ends_with(path, ".nsys-rep") || ends_with(path, ".qdrep"))
    return {std::nullopt, path + ": an Nsight Systems report; export it to SQLite first "
                                 "(nsys export --type sqlite " + path + ")"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return {std::nullopt, path + ": cannot read the file (permission denied?)"};
  std::array<char, 256> head{};
  in.read(head.data(), head.size());
  const auto n = static_cast<std::size_t>(in.gcount());
  if (n == 0) return {std::nullopt, path + ": empty file, not a trace"};
  if (n >= 16 && std::memcmp(head.data(), "SQLite format 3", 16) == 0) {
    // The application id sits in the database header (offset 68, big-endian):
    // a closed moetrace trace is told without opening it. One whose writer
    // was killed may hold its header in the WAL still: SQLite reads that.
    std::uint32_t app = 0;
    for (std::size_t i = 68; i < 72 && i < n; ++i) app = (app << 8) | static_cast<unsigned char>(head[i]);
    bool moetrace = n >= 72 && static_cast<std::int32_t>(app) == schema::kApplicationId;
    if (!moetrace) {
      try {
        moetrace = sqlite::Database(path, sqlite::Database::Mode::kReadOnly).pragma_int("application_id").value_or(0) ==
                   schema::kApplicationId;
      } catch (const Error& e) {
        return {std::nullopt, e.what()};
      }
    }
    if (moetrace) return {std::nullopt, path + ": already a moetrace trace; nothing to import"};
    return {Format::kNsys, {}};  // the importer says so if it is some other SQLite file
  }
  if (n >= 2 && static_cast<unsigned char>(head[0]) == 0x1f && static_cast<unsigned char>(head[1]) == 0x8b)
    return {Format::kKineto, {}};  // gzip; the parser tells whether it holds a trace
  for (std::size_t i = 0; i < n; ++i) {
    const char c = head[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (c == '{' || c == '[') return {Format::kKineto, {}};
    break;
  }
  return {std::nullopt, path + ": not a format moetrace imports (Nsight Systems SQLite export, or "
                               "PyTorch-profiler/Kineto JSON, optionally gzipped)"};
}

}  // namespace

Format detect_format(const std::string& path) {
  auto p = probe(path);
  if (!p.format) throw Error(p.why);
  return *p.format;
}

namespace {

// Runs the format's importer on `inputs` into a builder from `make`. A Kineto
// import that guessed its time base and rank wrong from a file's last bytes
// starts again (a new builder discards what the first one held), each file
// parsed whole.
template <class MakeBuilder>
ImportSummary run_importer(Format format, const std::vector<std::string>& inputs, int threads,
                           const MakeBuilder& make) {
  if (format == Format::kNsys) {
    const auto builder = make();
    nsys::import_files(inputs, *builder);
    return builder->finish();
  }
  try {
    const auto builder = make();
    kineto::import_files(inputs, *builder, threads);
    return builder->finish();
  } catch (const kineto::TailGuessedWrong&) {
  }
  const auto builder = make();
  kineto::import_files(inputs, *builder, threads, /*read_tails=*/false);
  return builder->finish();
}

}  // namespace

ImportSummary import_traces(const std::vector<std::string>& inputs, const std::string& output,
                            const ImportOptions& options) {
  if (inputs.empty()) throw Error("no input files to import");
  Format format = options.format;
  for (const auto& in : inputs) {
    check_readable(in);
    if (options.format != Format::kAuto) continue;
    const Format f = detect_format(in);
    if (format == Format::kAuto) format = f;
    else if (f != format)
      throw Error(in + ": a " + std::string(format_name(f)) + " trace among " +
                  std::string(format_name(format)) + " traces; import one format at a time");
  }
  for (const auto& in : inputs) {
    std::error_code ec;
    if (std::filesystem::equivalent(in, output, ec))
      throw Error(output + ": the output would overwrite an input");
  }
  return run_importer(format, inputs, options.threads, [&] {
    return std::make_unique<TraceBuilder>(output, format, inputs, options.progress);
  });
}

ImportedTrace import_in_memory(const std::string& input, ImportOptions options) {
  check_readable(input);
  const Format format = options.format != Format::kAuto ? options.format : detect_format(input);
  ImportedTrace out;
  run_importer(format, {input}, options.threads,
               [&] { return std::make_unique<TraceBuilder>(out, format, std::vector{input}, options.progress); });
  return out;
}

namespace {

// An SQLite file with the tables of an Nsight Systems export.
bool nsys_export(const std::string& path) {
  try {
    sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
    return db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND (name = 'StringIds' OR "
                        "name LIKE 'CUPTI_ACTIVITY_KIND_%' OR name = 'NVTX_EVENTS')")
               .value_or(0) > 0;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::optional<Format> foreign_format(const std::string& path) {
  auto format = probe(path).format;  // unset for a moetrace trace, a missing file, ...
  if (format == Format::kNsys && !nsys_export(path)) format.reset();
  return format;
}

TemporaryTraces::~TemporaryTraces() {
  for (const auto& [temp, input] : input_of_) {
    std::error_code ec;
    std::filesystem::remove(temp, ec);
  }
}

std::vector<std::string> TemporaryTraces::import_foreign(const std::vector<std::string>& paths,
                                                         ImportOptions options) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const auto& p : paths) {
    const auto format = foreign_format(p);
    if (!format) {
      out.push_back(p);
      continue;
    }
    static std::atomic<int> made{0};  // of this process
    const auto temp = (std::filesystem::temp_directory_path() /
                       ("moetrace-" + std::to_string(getpid()) + "-" + std::to_string(made++) + ".db"))
                          .string();
    options.format = *format;
    input_of_.emplace(temp, p);
    import_traces({p}, temp, options);
    out.push_back(temp);
  }
  return out;
}

std::string TemporaryTraces::input_of(const std::string& path) const {
  const auto it = input_of_.find(path);
  return it == input_of_.end() ? path : it->second;
}

}  // namespace moetrace::importers
