// Shared by trace_loader.cc and trace_summary.cc.
#pragma once

#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/sqlite.h"

namespace moetrace::analyzer {

// The run row, meta and run_config of an open trace into `run`.
void load_run_record(sqlite::Database& db, RunInfo& run);
[[noreturn]] void throw_empty_trace(const std::string& path);

}  // namespace moetrace::analyzer
