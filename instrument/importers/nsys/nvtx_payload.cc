#include "nvtx_payload.h"

#include <cstring>

namespace moetrace::importers::nsys {

namespace {

std::uint64_t read_le(std::string_view bytes, std::size_t at, int width) {
  std::uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace

int payload_integer_width(int type) {
  switch (type) {
    case 1: case 2: case 11: case 12: return 1;    // char, uchar, int8, uint8
    case 3: case 4: case 13: case 14: return 2;    // short, ushort, int16, uint16
    case 5: case 6: case 15: case 16: return 4;    // int, uint, int32, uint32
    case 7: case 8: case 9: case 10:                // long, ulong, long long, unsigned long long (LP64)
    case 17: case 18: case 22: case 23: return 8;  // int64, uint64, size_t, address
    default: return 0;
  }
}

bool payload_integer_signed(int type) {
  switch (type) {
    case 1: case 3: case 5: case 7: case 9: case 11: case 13: case 15: case 17: return true;
    default: return false;
  }
}

std::optional<DecodedPayload> decode_payload(std::string_view blob, const PayloadSchemas& schemas) {
  if (blob.size() < kPayloadHeaderBytes) return std::nullopt;
  DecodedPayload out;
  out.schema_id = static_cast<std::int64_t>(read_le(blob, 8, 4));
  const auto it = schemas.find(out.schema_id);
  if (it == schemas.end()) return std::nullopt;
  const auto& schema = it->second;
  const std::string_view payload = blob.substr(kPayloadHeaderBytes);
  if (schema.payload_size < 0 || payload.size() < static_cast<std::size_t>(schema.payload_size)) return std::nullopt;
  for (const auto& f : schema.fields) {
    const int width = payload_integer_width(f.type);
    // offset and payload_size come from the export as any int64: compared
    // without adding, so an offset near INT64_MAX cannot overflow.
    if (width == 0 || f.offset < 0 || f.offset > schema.payload_size - width) continue;
    const std::uint64_t raw = read_le(payload, static_cast<std::size_t>(f.offset), width);
    std::int64_t value = 0;
    if (payload_integer_signed(f.type)) {
      const int shift = 64 - 8 * width;  // sign-extend
      value = static_cast<std::int64_t>(raw << shift) >> shift;
    } else if (raw <= static_cast<std::uint64_t>(INT64_MAX)) {
      value = static_cast<std::int64_t>(raw);
    } else {
      continue;
    }
    out.integers.emplace(f.name, value);
  }
  return out;
}

}  // namespace moetrace::importers::nsys
