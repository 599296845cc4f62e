// libFuzzer target: the NVTX extended-payload decoder. The input describes a
// schema (its payload size and up to 16 entries of type and offset, as an
// export's NVTX_PAYLOAD_SCHEMA_ENTRIES may hold any values) followed by the
// binaryData blob. Decoding must never read outside the blob.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nvtx_payload.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace::importers::nsys;
  FuzzedDataProvider in(data, size);
  PayloadSchemas schemas;
  const auto schema_id = in.ConsumeIntegralInRange<std::int64_t>(0, 3);
  PayloadSchema schema;
  schema.payload_size = in.ConsumeIntegral<std::int64_t>();
  if (in.ConsumeBool()) schema.payload_size = in.ConsumeIntegralInRange<std::int64_t>(-1, 64);
  const int fields = in.ConsumeIntegralInRange<int>(0, 16);
  for (int i = 0; i < fields; ++i) {
    PayloadField f;
    f.name = "f" + std::to_string(i % 4);
    f.type = in.ConsumeIntegralInRange<int>(-1, 40);
    f.offset = in.ConsumeBool() ? in.ConsumeIntegral<std::int64_t>() : in.ConsumeIntegralInRange<std::int64_t>(-8, 72);
    schema.fields.push_back(f);
  }
  schemas.emplace(schema_id, schema);
  // The blob in a buffer of its own size, so ASan sees any read past it.
  const auto bytes = in.ConsumeRemainingBytes<char>();
  std::vector<char> blob(bytes.begin(), bytes.end());
  const auto decoded = decode_payload(std::string_view(blob.data(), blob.size()), schemas);
  if (decoded && decoded->schema_id != schema_id) __builtin_trap();
  return 0;
}
