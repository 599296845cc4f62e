// One line instead of a crash where the operating system stops a read: SQLite
// reads traces through mmap (trace_file.cc), and a file that another program
// truncates while it is mapped raises SIGBUS on the next page touched.
#pragma once

namespace moetrace::cli {

// Installs a SIGBUS handler that writes "moetrace: a file being read was
// truncated or changed by another program ..." to stderr and exits with 1.
void report_truncated_files();

}  // namespace moetrace::cli
