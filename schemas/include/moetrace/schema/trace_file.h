// Opening an existing trace: the checks every reader runs first, so that a
// wrong file gets one clear sentence instead of a SQLite error or a crash.
#pragma once

#include <string>

#include "moetrace/schema/sqlite.h"

namespace moetrace::schema {

// Opens `path` read-only after checking, in order: the file exists and is a
// regular file; it is a SQLite database; it is a moetrace trace (application
// id, with a hint where it is an Nsight Systems export); its schema version is
// one this build reads. Throws moetrace::Error("<path>: <problem>") otherwise.
sqlite::Database open_trace(const std::string& path);

// Why a folder given as a trace holds none (the readers of a folder take its
// *.db files, else its *.json, *.json.gz and *.sqlite files): empty, or what
// it holds instead, its first few names. One line, "<path>: ...".
std::string folder_without_traces(const std::string& path);

}  // namespace moetrace::schema
