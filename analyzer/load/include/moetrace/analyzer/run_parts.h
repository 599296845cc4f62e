// Shared by run_loader.cc and trace_merge.cc (load) and run_by_file.cc
// (analyses): a run's files checked and ordered as the parts of one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/analyzer/run_loader.h"

namespace moetrace::analyzer::detail {

// A file given: its trace, or why it could not be loaded.
struct LoadedFile {
  std::optional<Trace> trace;
  std::string error;
};

struct RunParts {
  std::vector<Trace> parts;               // in rank order (by each file's first rank)
  std::vector<std::size_t> loaded_index;  // each part's place among the files given
  std::shared_ptr<RunFiles> files;        // files, left out, duplicates (clocks, world and gaps: later)
  std::vector<std::int32_t> ranks;        // every rank held, sorted
};

// The loaded files as the parts of one run: files of another run refused
// (Error), files not loaded or whose ranks an earlier file holds left out,
// the rest in rank order. Takes the traces out of `loaded`.
RunParts assemble_run(const std::vector<std::string>& paths, std::vector<LoadedFile>& loaded, bool align);

// How merge_traces renamed each part's ids: its streams' (old id, new id),
// and the offset added to its buffer ids.
struct MergeIds {
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> streams;
  std::vector<std::int64_t> buffer_base;
};
Trace merge_traces(std::vector<Trace> parts, MergeIds& ids);

// The run's load and placement tables as the merge keeps them: sorted by
// key, one row per key (every rank file may hold the whole tables).
void dedupe_expert_load(std::vector<ExpertLoad>& v);
void dedupe_placements(std::vector<ExpertPlacement>& v);

// The merged trace's world size, the ranks missing from it and its path.
void finish_run(Trace& trace, RunParts& parts);

}  // namespace moetrace::analyzer::detail
