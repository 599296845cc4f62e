// An op's dependencies and buffer accesses as schema v2 stores them: two JSON
// arrays on its op_ranges row (op_ranges.deps, op_ranges.buffers), which the
// op_deps and op_buffers views expand into rows. Packing them saves two
// rows-per-link tables (about 5.6 link rows per op in a simulated trace).
//
//   deps:    [12,15,40]            op ids, ascending, each once
//   buffers: [[7,1],[9,3]]         [buffer id, access], ascending by buffer id,
//                                  each buffer once (1 read, 2 write, 3 both)
//
// An op without any is NULL in the table and "" here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::schema {

struct BufferLink {
  std::int64_t buffer = 0;
  std::int32_t access = 1;  // schema::Access
  auto operator<=>(const BufferLink&) const = default;
};

// Sort, merge duplicates (a buffer's accesses OR together) and encode; the
// vectors are reordered in place.
std::string encode_deps(std::vector<std::int64_t>& deps);
std::string encode_buffers(std::vector<BufferLink>& links);

// Append what `json` holds to `out`; false where it is not such an array
// (a damaged or hand-edited trace). Whitespace is allowed.
bool parse_deps(std::string_view json, std::vector<std::int64_t>& out);
bool parse_buffers(std::string_view json, std::vector<BufferLink>& out);

}  // namespace moetrace::schema
