// GEMMs as the PyTorch profiler records them with record_shapes=True: the
// input dims of a framework op (table input_shapes) give its in and out
// features and rows, and the op whose host range holds a kernel's launch is
// the op that kernel computes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// A GEMM as its recorded shapes give it: in and out features, and the rows
// it multiplies (the product of the first operand's leading dims).
struct GemmShape {
  std::int64_t in = 0, out = 0, rows = 0;
  double flops() const { return 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out); }
  auto operator<=>(const GemmShape&) const = default;
};

// The GEMM of an op name and its recorded input dims (JSON text as in
// input_shapes.input_dims, PyTorch's ATen signatures: mm(a[T,K], b[K,N]),
// addmm(bias, a, b), linear(x, W[N,K]), bmm/baddbmm over a batch,
// _grouped_mm(a[T,K], b[E,K,N])); nullopt where it is no GEMM of two
// matrices this reads.
std::optional<GemmShape> gemm_shape(std::string_view op_name, std::string_view input_dims);

// The host ranges with recorded shapes, per (rank, thread), for finding the
// framework op that launched a kernel.
class LaunchShapes {
 public:
  explicit LaunchShapes(const Trace& trace);
  bool empty() const { return ranges_.empty(); }
  // The innermost range with recorded shapes holding the launching call of
  // `a` (an index into trace.nvtx), or nullopt.
  std::optional<std::size_t> range_of(const Activity& a) const;
  // Its GEMM, where it is one.
  std::optional<GemmShape> gemm_of(std::size_t range) const;

 private:
  const Trace& t_;
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> ranges_;  // by start
};

}  // namespace moetrace::analyzer
