#include "gunzip.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <vector>

#include "text_trace.h"

namespace moetrace::testing {

std::string gunzip(const std::string& from, const std::string& to) {
  gzFile in = gzopen(from.c_str(), "rb");
  if (in == nullptr) return "cannot open " + from;
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  std::vector<char> buf(1 << 16);
  int n = 0;
  while ((n = gzread(in, buf.data(), static_cast<unsigned>(buf.size()))) > 0) out.write(buf.data(), n);
  int code = Z_OK;
  const char* message = gzerror(in, &code);  // a truncated file: Z_BUF_ERROR, not n < 0
  const std::string error = n < 0 || code != Z_OK ? message : "";
  gzclose(in);
  out.close();
  if (!error.empty()) return error;  // zlib names the file
  return out ? "" : "cannot write " + to;
}

std::string inflated(const std::string& from, const std::string& name) {
  const auto to = temp_path(name);
  if (const auto error = gunzip(from, to); !error.empty()) {
    ADD_FAILURE() << error;
    return "";
  }
  return to;
}

}  // namespace moetrace::testing
