// Writing a loaded trace back as trace files through the TraceWriter: the
// whole of it (`moetrace merge`) or one file per rank (`moetrace run
// --split-ranks`). What is written is what the analyzer reads
// (analyzer/trace.h): the tables it does not load (sync events, CUPTI
// overhead, NVTX colours and categories, collectives' process groups, copy
// memory kinds, stream priorities) are not carried.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::cli {

using ConfigEntries = std::vector<std::pair<std::string, std::string>>;

class TraceFiles {
 public:
  explicit TraceFiles(const analyzer::Trace& trace);  // indexes rows by rank once
  ~TraceFiles();
  // The ranks `ranks` (sorted; empty: every rank) into a new trace at
  // `path`, with run_config entries `extra` added.
  void write(const std::string& path, const std::vector<std::int32_t>& ranks, const ConfigEntries& extra) const;

 private:
  struct Index;
  const analyzer::Trace& trace_;
  std::unique_ptr<Index> index_;
};

// "run.db" -> "run.rank3.db": the file of one rank (as the CUDA backend's NCCL runs name theirs).
std::string rank_file_path(const std::string& path, int rank);

}  // namespace moetrace::cli
