// Nsight Systems SQLite exports (`nsys export --type sqlite`) -> moetrace.
#pragma once

#include <string>
#include <vector>

namespace moetrace::importers {

class TraceBuilder;

namespace nsys {

// Imports every file (each one or more processes = ranks) into `builder`.
// Throws moetrace::Error naming the file for an export this importer cannot
// read (not an export, an unknown schema major version, a table lacking a
// column it needs, a damaged database).
void import_files(const std::vector<std::string>& paths, TraceBuilder& builder);

}  // namespace nsys
}  // namespace moetrace::importers
