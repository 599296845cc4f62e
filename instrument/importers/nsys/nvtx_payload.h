// NVTX extended (schema-based) payloads in Nsight Systems SQLite exports.
//
// NCCL 2.19+ annotates its API calls with NVTX ranges in domain "NCCL" whose
// payload is a registered schema (nvToolsExtPayload.h): e.g. "NCCL
// communicator ID" (uint64), "Message size [bytes]" (size_t), "Peer rank",
// "No. of ranks", "Rank". An export keeps the schemas in
// NVTX_PAYLOAD_SCHEMAS (schemaId, payloadSize) and NVTX_PAYLOAD_SCHEMA_ENTRIES
// (schemaId, idx, type, name, offset; a NULL offset is 0), and each event's
// payload in NVTX_EVENTS.binaryData: a 32-byte little-endian header (uint32
// domain id, uint32 reserved, uint32 schema id, uint32 reserved, uint64
// payload size, uint64 total size) followed by the payload, laid out by the
// schema's entry offsets. NVIDIA does not document this layout; it is the one
// third-party readers of Nsight Systems exports decode. No export in
// ../shared/data carries such payloads, so it is tested on hand-built exports
// only; a blob that does not fit it is counted as undecoded, never guessed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::importers::nsys {

struct PayloadField {
  std::string name;
  int type = 0;             // NVTX_PAYLOAD_ENTRY_TYPE_*
  std::int64_t offset = 0;  // in the payload (after the header)
};

struct PayloadSchema {
  std::int64_t payload_size = 0;
  std::vector<PayloadField> fields;
};

using PayloadSchemas = std::map<std::int64_t, PayloadSchema>;  // by schema id

inline constexpr std::size_t kPayloadHeaderBytes = 32;

// Byte width of an integer NVTX payload entry type (char .. uint64, size_t,
// address), or 0 for types this importer does not read (floats, strings,
// nested schemas).
int payload_integer_width(int type);
bool payload_integer_signed(int type);

struct DecodedPayload {
  std::int64_t schema_id = 0;
  std::map<std::string, std::int64_t> integers;  // integer fields by name (uint64 above INT64_MAX: dropped)
};

// Decodes one binaryData blob; nullopt where it is shorter than its header,
// names an unknown schema or is shorter than the schema's payload.
std::optional<DecodedPayload> decode_payload(std::string_view blob, const PayloadSchemas& schemas);

}  // namespace moetrace::importers::nsys
