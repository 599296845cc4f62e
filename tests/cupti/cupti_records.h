// Synthetic CUPTI activity records and a sink that keeps what the converter
// writes: shared by the converter's tests (no GPU or driver needed).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "moetrace/cupti/activity_converter.h"

namespace moetrace::cupti::fake {

struct VectorSink : RecordSink {
  std::map<std::string, StringId> ids;
  std::vector<std::string> strings;
  std::vector<instrument::StreamRecord> streams;
  std::vector<instrument::KernelRecord> kernels;
  std::vector<instrument::MemcpyRecord> memcpys;
  std::vector<instrument::MemsetRecord> memsets;
  std::vector<instrument::MemoryEventRecord> memory;
  std::vector<instrument::ApiCallRecord> apis;
  std::vector<instrument::SyncRecord> syncs;
  std::vector<instrument::OverheadRecord> overheads;
  std::vector<instrument::NvtxRangeRecord> nvtx;
  std::vector<instrument::OpRangeRecord> ops;

  StringId intern(std::string_view s) override {
    auto [it, inserted] = ids.try_emplace(std::string(s), StringId(static_cast<std::int32_t>(strings.size())));
    if (inserted) strings.emplace_back(s);
    return it->second;
  }
  const std::string& str(StringId id) const { return strings.at(static_cast<std::size_t>(id.value)); }
  void add(const instrument::StreamRecord& r) override { streams.push_back(r); }
  void add(const instrument::KernelRecord& r) override { kernels.push_back(r); }
  void add(const instrument::MemcpyRecord& r) override { memcpys.push_back(r); }
  void add(const instrument::MemsetRecord& r) override { memsets.push_back(r); }
  void add(const instrument::MemoryEventRecord& r) override { memory.push_back(r); }
  void add(const instrument::ApiCallRecord& r) override { apis.push_back(r); }
  void add(const instrument::SyncRecord& r) override { syncs.push_back(r); }
  void add(const instrument::OverheadRecord& r) override { overheads.push_back(r); }
  void add(const instrument::NvtxRangeRecord& r) override { nvtx.push_back(r); }
  void add(const instrument::OpRangeRecord& r) override { ops.push_back(r); }
};

template <class T>
inline T record(CUpti_ActivityKind kind) {
  T r;
  std::memset(&r, 0, sizeof r);
  r.kind = kind;
  return r;
}

inline const CUpti_Activity* as_activity(const void* r) { return static_cast<const CUpti_Activity*>(r); }

// What every record of work on a stream has (kernel, memcpy, memset,
// synchronisation): its context and stream, the call that launched it
// (correlation id) and its times.
template <class T>
inline T on_stream(CUpti_ActivityKind kind, std::uint32_t ctx, std::uint32_t stream, std::uint32_t corr,
            std::uint64_t start, std::uint64_t end) {
  auto r = record<T>(kind);
  r.contextId = ctx;
  r.streamId = stream;
  r.correlationId = corr;
  r.start = start;
  r.end = end;
  return r;
}

inline CUpti_ActivityKernel10 kernel(std::uint32_t ctx, std::uint32_t stream, std::uint32_t corr,
                              std::uint64_t start, std::uint64_t end, const char* name) {
  auto k = on_stream<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, ctx, stream, corr, start, end);
  k.name = name;
  k.gridX = 8;
  k.gridY = k.gridZ = 1;
  k.blockX = 256;
  k.blockY = k.blockZ = 1;
  k.staticSharedMemory = 1024;
  k.dynamicSharedMemory = 2048;
  k.registersPerThread = 32;
  return k;
}

// A runtime or driver call: its callback id names it (the converter asks
// ConverterOptions' namer for the name).
inline CUpti_ActivityAPI api_call(CUpti_ActivityKind kind, std::uint32_t cbid, std::uint32_t corr) {
  auto a = record<CUpti_ActivityAPI>(kind);
  a.cbid = cbid;
  a.correlationId = corr;
  return a;
}

inline CUpti_ActivityExternalCorrelation correlation(std::uint32_t corr, std::uint64_t op) {
  auto e = record<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  e.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  e.externalId = op;
  e.correlationId = corr;
  return e;
}

inline CUpti_ActivityMarker2 marker(std::uint32_t id, CUpti_ActivityFlag flag, std::uint64_t ts,
                             const char* name, const char* domain) {
  auto m = record<CUpti_ActivityMarker2>(CUPTI_ACTIVITY_KIND_MARKER);
  m.flags = flag;
  m.id = id;
  m.timestamp = ts;
  m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  m.objectId.pt.processId = 10;
  m.objectId.pt.threadId = 77;
  m.name = name;
  m.domain = domain;
  return m;
}

inline instrument::StreamRecord stream_record(int id, int rank, const char* role) {
  return {.id = StreamId(id), .rank = RankId(rank), .role = role, .name = "rank" + std::to_string(rank) + "." + role};
}

// An op's device times, [start, end).
using Span = std::pair<std::int64_t, std::int64_t>;
inline Span span_of(const instrument::OpRangeRecord& o) { return {o.start_ns, o.end_ns}; }

inline OpLabel gate_label() {
  return {.name = "L0.it1.gate", .op = OpId(5), .rank = RankId(1), .stream = StreamId(3), .kind = OpKind::kGate,
          .layer = 0, .iteration = 1, .flops = 1e6};
}

struct ConverterTest : ::testing::Test {
  VectorSink sink;
  ActivityConverter conv{sink, ConverterOptions{RankId(0), [](schema::ApiKind k, std::uint32_t cbid) {
                                                  return std::string(k == schema::ApiKind::kRuntime ? "cuda" : "cu") +
                                                         "Call" + std::to_string(cbid);
                                                }}};
  void feed(const void* r) { conv.convert(as_activity(r)); }
};

}  // namespace moetrace::cupti::fake
