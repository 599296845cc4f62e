// The SQLite trace schema (schemas/trace_schema_v2.sql) compiled into the
// binaries, and the constants that identify a moetrace trace.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "moetrace/schema/ascii.h"

namespace moetrace::schema {

inline constexpr std::int32_t kApplicationId = 0x4D4F4554;  // 'MOET'
inline constexpr std::int32_t kVersion = 2;     // what writers write
inline constexpr std::int32_t kOldestVersion = 1;  // what readers still read

// CREATE TABLE statements of the current version.
std::string_view tables_sql();
// CREATE INDEX statements; created when a writer closes a trace.
std::string_view indexes_sql();

namespace detail {
// (of a lower-case name)
inline bool matrix_product_lower(std::string_view n) {
  return n.find("mm") != std::string_view::npos || n.find("matmul") != std::string_view::npos ||
         n.find("linear") != std::string_view::npos;  // "mm" covers "gemm"
}
inline bool top_k_lower(std::string_view n) { return n.ends_with("topk"); }
}  // namespace detail

// Ops that multiply matrices, by name (aten::mm, addmm, bmm, baddbmm,
// matmul, linear, _grouped_mm, _scaled_mm, grouped GEMMs), any case.
inline bool matrix_product_name(std::string_view name) { return detail::matrix_product_lower(to_ascii_lower(name)); }

// A top-k selection, by name (aten::topk, a router's), any case.
inline bool top_k_name(std::string_view name) { return detail::top_k_lower(to_ascii_lower(name)); }

// The host ranges whose input shapes a trace keeps (input_shapes): what an
// MoE layer's sizes are read from, its matrix products and its router's
// top-k.
inline bool shapes_kept_name(std::string_view name) {
  const std::string n = to_ascii_lower(name);
  return detail::matrix_product_lower(n) || detail::top_k_lower(n);
}

// memcpy.copy_kind / src_kind / dst_kind follow CUPTI's enums.
enum class CopyKind : std::int32_t {
  kUnknown = 0, kHostToDevice = 1, kDeviceToHost = 2, kHostToArray = 3, kArrayToHost = 4,
  kArrayToArray = 5, kArrayToDevice = 6, kDeviceToArray = 7, kDeviceToDevice = 8,
  kHostToHost = 9, kPeerToPeer = 10,
};
// memory_events.memory_kind, buffers.memory_kind
enum class MemoryKind : std::int32_t { kUnknown = 0, kDevice = 1, kPinnedHost = 2, kManaged = 3, kPageableHost = 4 };

// A copy kind as CUPTI, the PyTorch profiler (Kineto) and Nsight Systems
// abbreviate it ("HtoD", "DtoH", ...); "" for kUnknown and values outside
// the enum.
constexpr std::string_view copy_kind_abbreviation(CopyKind k) {
  constexpr std::string_view kNames[] = {"",     "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                         "AtoD", "DtoA", "DtoD", "HtoH", "PtoP"};
  const auto i = static_cast<std::int32_t>(k);
  return i >= 0 && i < static_cast<std::int32_t>(std::size(kNames)) ? kNames[i] : std::string_view();
}
inline constexpr CopyKind kLastCopyKind = CopyKind::kPeerToPeer;

// A memory kind as the PyTorch profiler names it in a copy's name
// ("Memcpy HtoD (Pageable -> Device)"); "" for kUnknown and values outside
// the enum.
constexpr std::string_view kineto_memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::kDevice: return "Device";
    case MemoryKind::kPinnedHost: return "Pinned";
    case MemoryKind::kManaged: return "Managed";
    case MemoryKind::kPageableHost: return "Pageable";
    default: return "";
  }
}
// api_calls.api
enum class ApiKind : std::int32_t { kRuntime = 1, kDriver = 2 };
// op_buffers.access
enum class Access : std::int32_t { kRead = 1, kWrite = 2, kReadWrite = 3 };

}  // namespace moetrace::schema
