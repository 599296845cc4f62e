// A trace of another tool imported into memory instead of into a trace file:
// the records the importer hands the TraceBuilder, as the TraceWriter would
// have stored them, for a reader that needs no file (`moetrace report
// TRACE.json.gz` reads them straight into its model, analyzer::load_trace).
// The tables the analyzer does not read (CUPTI overhead) are not kept; their
// times still count in the run's time range.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/importers/import.h"
#include "moetrace/instrument/records.h"

namespace moetrace::importers {

struct ImportedTrace {
  instrument::RunRecord run;  // its world_size is the run's, as finish() found it
  std::vector<std::string> strings;  // by StringId
  // run_config entries in the order they were set; a later value of a key
  // replaces an earlier one, as in the trace file.
  std::vector<std::pair<std::string, std::string>> config;
  std::vector<instrument::DeviceRecord> devices;
  std::vector<instrument::RankRecord> ranks;
  std::vector<instrument::StreamRecord> streams;
  std::vector<instrument::KernelRecord> kernels;
  std::vector<instrument::MemcpyRecord> memcpys;
  std::vector<instrument::MemsetRecord> memsets;
  std::vector<instrument::ApiCallRecord> api_calls;
  std::vector<instrument::SyncRecord> sync_events;
  std::vector<instrument::NvtxRangeRecord> nvtx;
  std::vector<instrument::MemoryEventRecord> memory_events;
  std::vector<instrument::CollectiveRecord> collectives;
  std::vector<instrument::OpRangeRecord> ops;  // each with its id
  // The run's time range over every timed record (start > end: none).
  std::int64_t start_ns = INT64_MAX, end_ns = INT64_MIN;
};

// The format of a trace of another tool that import_traces() reads, or
// nullopt for anything else (a moetrace trace, a missing file, an SQLite file
// that is not an Nsight Systems export), which a trace reader then names.
std::optional<Format> foreign_format(const std::string& path);

// Imports one file of another tool into memory; the records are those
// import_traces() would write for it. Throws moetrace::Error as import_traces().
ImportedTrace import_in_memory(const std::string& input, ImportOptions options = {});

}  // namespace moetrace::importers
