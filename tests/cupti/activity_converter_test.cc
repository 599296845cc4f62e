// The CUPTI -> trace conversion, fed with synthetic activity records built by
// hand (only the CUPTI headers are needed, no GPU or driver).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "moetrace/cupti/activity_converter.h"
#include "moetrace/cupti/callback_gate.h"
#include "moetrace/cupti/converter_intake.h"
#include "cupti_records.h"

namespace moetrace::cupti {
namespace {

using namespace fake;

TEST_F(ConverterTest, KernelsGetTheirOpAndTheOpGetsDeviceTimes) {
  conv.map_stream(1, 7, stream_record(3, 1, "compute"));
  ASSERT_EQ(sink.streams.size(), 1u);
  EXPECT_EQ(sink.streams[0].native_id, 7);

  // The kernel's record arrives before the correlation record: it waits.
  const auto k1 = kernel(1, 7, 42, 1000, 1500, "_Z12gate_softmaxPfi");
  feed(&k1);
  EXPECT_TRUE(sink.kernels.empty());
  const auto c1 = correlation(42, 5);
  feed(&c1);
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_EQ(sink.kernels[0].op.value, 5);
  EXPECT_EQ(sink.kernels[0].stream.value, 3);
  EXPECT_EQ(sink.kernels[0].rank.value, 1);
  EXPECT_EQ(sink.str(sink.kernels[0].name), "gate_softmax(float*, int)");
  EXPECT_EQ(sink.kernels[0].shared_bytes, 3072);
  EXPECT_EQ(sink.kernels[0].grid[0], 8);
  EXPECT_EQ(sink.kernels[0].block[0], 256);
  EXPECT_EQ(sink.kernels[0].registers, 32);

  // A second kernel of the same op, correlation known first.
  const auto c2 = correlation(43, 5);
  feed(&c2);
  const auto k2 = kernel(1, 7, 43, 1600, 2100, "gemm");
  feed(&k2);
  ASSERT_EQ(sink.kernels.size(), 2u);

  // The op's NVTX range, with its payload.
  const std::string msg = format_op_message(gate_label());
  const auto start = marker(9, CUPTI_ACTIVITY_FLAG_MARKER_START, 900, msg.c_str(), kNvtxDomain);
  feed(&start);
  auto data = record<CUpti_ActivityMarkerData2>(CUPTI_ACTIVITY_KIND_MARKER_DATA);
  data.id = 9;
  data.payloadKind = CUPTI_METRIC_VALUE_KIND_INT64;
  data.payload.metricValueInt64 = 5;
  data.flags = CUPTI_ACTIVITY_FLAG_MARKER_COLOR_ARGB;
  data.color = 0xFF31A354;
  data.category = 4;
  feed(&data);
  const auto end = marker(9, CUPTI_ACTIVITY_FLAG_MARKER_END, 950, nullptr, nullptr);
  feed(&end);
  ASSERT_EQ(sink.nvtx.size(), 1u);
  const auto& r = sink.nvtx[0];
  EXPECT_EQ(r.start_ns, 900);
  EXPECT_EQ(r.end_ns, 950);
  EXPECT_EQ(r.thread_id, 77);
  EXPECT_EQ(r.rank.value, 1);
  EXPECT_EQ(sink.str(r.domain), "moetrace");
  EXPECT_EQ(sink.str(r.name), msg);
  EXPECT_EQ(r.payload_int, 5);
  EXPECT_EQ(r.color, 0xFF31A354);
  EXPECT_EQ(r.category, 4);

  EXPECT_TRUE(sink.ops.empty());  // op ranges wait for every buffer
  conv.finish();
  ASSERT_EQ(sink.ops.size(), 1u);
  const auto& op = sink.ops[0];
  EXPECT_EQ(op.id.value, 5);
  EXPECT_EQ(op.kind, OpKind::kGate);
  EXPECT_EQ(op.rank.value, 1);
  EXPECT_EQ(op.stream.value, 3);
  EXPECT_EQ(op.layer, 0);
  EXPECT_EQ(op.iteration, 1);
  EXPECT_EQ(op.start_ns, 1000);
  EXPECT_EQ(op.end_ns, 2100);
  EXPECT_EQ(op.launch_start_ns, 900);
  EXPECT_EQ(op.launch_end_ns, 950);
  EXPECT_DOUBLE_EQ(op.flops, 1e6);
  EXPECT_EQ(sink.str(op.name), "L0.it1.gate");
  conv.finish();  // idempotent
  EXPECT_EQ(sink.ops.size(), 1u);
}

TEST_F(ConverterTest, UnmappedStreamsGetFreshIdsAndTheirDevicesRank) {
  conv.map_device(2, RankId(6));
  auto k = kernel(4, 13, 0, 10, 20, "k");
  k.deviceId = 2;
  feed(&k);
  conv.finish();
  ASSERT_EQ(sink.streams.size(), 1u);
  EXPECT_EQ(sink.streams[0].id.value, ActivityConverter::kFirstAutoStream);
  EXPECT_EQ(sink.streams[0].role, instrument::kRoleOther);
  EXPECT_EQ(sink.streams[0].rank.value, 6);
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_FALSE(sink.kernels[0].op.valid());
  EXPECT_EQ(sink.kernels[0].rank.value, 6);
  EXPECT_EQ(conv.stats().activities_without_op, 1);
}

TEST_F(ConverterTest, MemcpyMatchesTheRuntimeCorrelationToo) {
  conv.map_stream(1, 2, stream_record(0, 0, "copy"));
  auto m = on_stream<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY, 1, 2, 900, 50, 80);
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  m.bytes = 4096;
  m.runtimeCorrelationId = 901;
  feed(&m);
  const auto c = correlation(901, 12);
  feed(&c);
  ASSERT_EQ(sink.memcpys.size(), 1u);
  const auto& r = sink.memcpys[0];
  EXPECT_EQ(r.op.value, 12);
  EXPECT_EQ(r.copy_kind, schema::CopyKind::kDeviceToHost);
  EXPECT_EQ(r.src_kind, schema::MemoryKind::kDevice);
  EXPECT_EQ(r.dst_kind, schema::MemoryKind::kPinnedHost);
  EXPECT_EQ(r.bytes, 4096);

  auto s = on_stream<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET, 1, 2, 902, 90, 95);
  s.bytes = 64;
  s.value = 0;
  feed(&s);
  conv.finish();  // never correlated: written without an op
  ASSERT_EQ(sink.memsets.size(), 1u);
  EXPECT_FALSE(sink.memsets[0].op.valid());
}

TEST_F(ConverterTest, MemoryEventsGetAnnouncedBuffers) {
  conv.map_stream(1, 5, stream_record(4, 2, "compute"));
  conv.note_allocation(0x1000, BufferId(30));
  conv.note_allocation(0x1000, BufferId(31));  // the address is reused later
  // 512 bytes of device memory, on context 1's stream 5, call 7.
  const auto memory_event = [](CUpti_ActivityMemoryOperationType op, std::uint64_t address, std::uint64_t ts,
                               std::uint32_t is_async) {
    auto m = record<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
    m.memoryOperationType = op;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.address = address;
    m.bytes = 512;
    m.timestamp = ts;
    m.contextId = 1;
    m.streamId = 5;
    m.isAsync = is_async;
    m.correlationId = 7;
    return m;
  };
  const auto alloc = memory_event(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x1000, 100, 1);
  const auto release = memory_event(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, 0x1000, 200, 1);
  for (auto* r : {&alloc, &release, &alloc}) feed(r);
  const auto unknown = memory_event(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 0x9000, 100, 0);
  feed(&unknown);
  ASSERT_EQ(sink.memory.size(), 4u);
  EXPECT_TRUE(sink.memory[0].alloc);
  EXPECT_EQ(sink.memory[0].buffer.value, 30);
  EXPECT_EQ(sink.memory[0].stream.value, 4);
  EXPECT_EQ(sink.memory[0].rank.value, 2);
  EXPECT_EQ(sink.memory[0].memory_kind, schema::MemoryKind::kDevice);
  EXPECT_FALSE(sink.memory[1].alloc);
  EXPECT_EQ(sink.memory[1].buffer.value, 30);
  EXPECT_EQ(sink.memory[1].ts_ns, 200);
  EXPECT_EQ(sink.memory[2].buffer.value, 31);
  EXPECT_FALSE(sink.memory[3].buffer.valid());
  EXPECT_FALSE(sink.memory[3].stream.valid());
}

TEST_F(ConverterTest, ApiCallsSyncAndOverhead) {
  auto rt = api_call(CUPTI_ACTIVITY_KIND_RUNTIME, 211, 3);
  rt.start = 1;
  rt.end = 9;
  rt.threadId = 55;
  rt.returnValue = 0;
  auto drv = rt;
  drv.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  drv.cbid = 307;
  drv.returnValue = 2;
  feed(&rt);
  feed(&drv);
  ASSERT_EQ(sink.apis.size(), 2u);
  EXPECT_EQ(sink.apis[0].api, schema::ApiKind::kRuntime);
  EXPECT_EQ(sink.str(sink.apis[0].name), "cudaCall211");
  EXPECT_EQ(sink.apis[0].correlation_id, 3);
  EXPECT_EQ(sink.apis[0].thread_id, 55);
  EXPECT_EQ(sink.apis[1].api, schema::ApiKind::kDriver);
  EXPECT_EQ(sink.str(sink.apis[1].name), "cuCall307");
  EXPECT_EQ(sink.apis[1].return_code, 2);

  conv.map_stream(1, 7, stream_record(2, 3, "comm"));
  auto sync = on_stream<CUpti_ActivitySynchronization2>(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, 1, 7, 4, 10, 30);
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  auto ctx_sync = sync;
  ctx_sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  ctx_sync.streamId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  feed(&sync);
  feed(&ctx_sync);
  ASSERT_EQ(sink.syncs.size(), 2u);
  EXPECT_EQ(sink.syncs[0].stream.value, 2);
  EXPECT_EQ(sink.syncs[0].rank.value, 3);
  EXPECT_EQ(sink.syncs[0].kind, static_cast<int>(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE));
  EXPECT_FALSE(sink.syncs[1].stream.valid());

  auto ov = record<CUpti_ActivityOverhead3>(CUPTI_ACTIVITY_KIND_OVERHEAD);
  ov.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
  ov.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  ov.objectId.pt.threadId = 99;
  ov.start = 5;
  ov.end = 6;
  feed(&ov);
  ASSERT_EQ(sink.overheads.size(), 1u);
  EXPECT_EQ(sink.overheads[0].kind, "cupti_buffer_flush");
  EXPECT_EQ(sink.overheads[0].thread_id, 99);
}

TEST_F(ConverterTest, UserRangesInstantMarkersAndUnclosedRanges) {
  const auto user = marker(1, CUPTI_ACTIVITY_FLAG_MARKER_START, 10, "forward", nullptr);
  feed(&user);
  const auto user_end = marker(1, CUPTI_ACTIVITY_FLAG_MARKER_END, 20, nullptr, nullptr);
  feed(&user_end);
  const auto instant = marker(2, CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS, 15, "tick", "app");
  feed(&instant);
  const auto open = marker(3, CUPTI_ACTIVITY_FLAG_MARKER_START, 30, "never closed", "app");
  feed(&open);
  const auto stray_end = marker(4, CUPTI_ACTIVITY_FLAG_MARKER_END, 40, nullptr, nullptr);
  feed(&stray_end);
  conv.finish();
  ASSERT_EQ(sink.nvtx.size(), 3u);
  EXPECT_EQ(sink.str(sink.nvtx[0].name), "forward");
  EXPECT_EQ(sink.str(sink.nvtx[0].domain), "");
  EXPECT_EQ(sink.nvtx[1].start_ns, 15);
  EXPECT_EQ(sink.nvtx[1].end_ns, 15);
  EXPECT_EQ(sink.nvtx[2].end_ns, -1);
  EXPECT_TRUE(sink.ops.empty());  // no moetrace ranges: no ops
}

TEST_F(ConverterTest, OpsAnnouncedWithoutNvtxStillGetRanges) {
  OpLabel l = gate_label();
  conv.note_op(l, 100, 110);
  const auto c = correlation(8, 5);
  feed(&c);
  const auto k = kernel(1, 1, 8, 300, 400, "k");
  feed(&k);
  OpLabel empty = gate_label();
  empty.op = OpId(6);
  conv.note_op(empty, 120, 130);
  conv.finish();
  ASSERT_EQ(sink.ops.size(), 2u);
  EXPECT_EQ(span_of(sink.ops[0]), Span(300, 400));
  EXPECT_EQ(sink.ops[0].launch_start_ns, 100);
  // Nothing ran: a point where its stream reached it, after op 5's kernel.
  EXPECT_EQ(span_of(sink.ops[1]), Span(400, 400));
  EXPECT_EQ(sink.ops[1].launch_end_ns, 130);
}

// An op that ran nothing on the device (a one-rank all-to-all, a timing-only
// collective) is placed where its stream got to it, not where the host was
// when it issued it: the host runs far ahead of the GPU, and an op placed at
// its launch made its layer's window span from one iteration's issue to the
// next iteration's GPU work (seen on an H200: a 72 ms layer window in a 40 ms
// iteration).
TEST_F(ConverterTest, OpsThatRanNothingSitWhereTheirStreamReachedThem) {
  auto label = [](std::int64_t op, int stream) {
    OpLabel l = gate_label();
    l.op = OpId(op);
    l.stream = StreamId(stream);
    return l;
  };
  conv.note_op(label(10, 3), 100, 110);  // empty, issued first: at its launch end
  conv.note_op(label(11, 3), 120, 130);  // runs 1000-5000
  conv.note_op(label(12, 3), 140, 150);  // empty: after op 11's work
  conv.note_op(label(13, 3), 160, 170);  // runs 5000-6000
  conv.note_op(label(14, 3), 9000, 9100);  // empty, issued after the stream went idle
  conv.note_op(label(15, 4), 145, 155);  // empty, on another stream: nothing before it there
  conv.note_op(label(16, 4), 165, 175);  // empty, on stream 4, waits for op 11 (stream 3)
  conv.note_waits(OpId(16), {OpId(11)});
  conv.note_op(label(17, 4), 180, 190);  // empty, after op 16 on its stream
  const auto c11 = correlation(21, 11), c13 = correlation(23, 13);
  feed(&c11);
  feed(&c13);
  const auto k11 = kernel(1, 1, 21, 1000, 5000, "k11"), k13 = kernel(1, 1, 23, 5000, 6000, "k13");
  feed(&k11);
  feed(&k13);
  conv.finish();
  std::map<std::int64_t, Span> at;
  for (const auto& o : sink.ops) at[o.id.value] = span_of(o);
  ASSERT_EQ(at.size(), 8u);
  EXPECT_EQ(at[10], Span(110, 110));
  EXPECT_EQ(at[11], Span(1000, 5000));
  EXPECT_EQ(at[12], Span(5000, 5000));
  EXPECT_EQ(at[13], Span(5000, 6000));
  EXPECT_EQ(at[14], Span(9100, 9100));
  EXPECT_EQ(at[15], Span(155, 155));
  EXPECT_EQ(at[16], Span(5000, 5000));
  EXPECT_EQ(at[17], Span(5000, 5000));
}

// The waits reach the converter through the issuing thread's inbox, like
// the ops themselves.
TEST(ConverterIntake, WaitsPlaceAnOpThatRanNothing) {
  VectorSink sink;
  ConverterIntake intake(sink, ConverterOptions{RankId(0), nullptr});
  OpLabel busy = gate_label(), empty = gate_label();
  empty.op = OpId(6);
  empty.stream = StreamId(9);
  intake.note_op(busy, 100, 110);
  intake.note_op(empty, 120, 130);
  intake.note_waits(OpId(6), {OpId(5)});
  intake.with_converter([&](ActivityConverter& c) {
    const auto corr = correlation(8, 5);
    c.convert(as_activity(&corr));
    const auto k = kernel(1, 1, 8, 300, 400, "k");
    c.convert(as_activity(&k));
    c.finish();
  });
  ASSERT_EQ(sink.ops.size(), 2u);
  EXPECT_EQ(sink.ops[1].id.value, 6);
  EXPECT_EQ(sink.ops[1].start_ns, 400);
}

TEST_F(ConverterTest, OtherKindsAreCountedNotConverted) {
  auto r = record<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CDP_KERNEL);
  feed(&r);
  conv.convert(nullptr);
  EXPECT_EQ(conv.stats().unknown_kinds, 1);
}

TEST(Demangle, PlainNamesPassThrough) {
  EXPECT_EQ(demangle("_Z3fooi"), "foo(int)");
  EXPECT_EQ(demangle("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  EXPECT_EQ(demangle(nullptr), "<unnamed>");
}

TEST(KernelNames, DemangledOncePerDistinctName) {
  VectorSink sink;
  int interned_before = 0;
  ActivityConverter conv{sink, ConverterOptions{}};
  const auto c = correlation(1, 9);
  conv.convert(as_activity(&c));
  interned_before = static_cast<int>(sink.strings.size());
  for (int i = 0; i < 5; ++i) {
    const auto k = kernel(1, 7, 1, 100 + i, 110 + i, i == 2 ? "_Z3barv" : "_Z3fooi");
    conv.convert(as_activity(&k));
  }
  ASSERT_EQ(sink.kernels.size(), 5u);
  EXPECT_EQ(sink.str(sink.kernels[0].name), "foo(int)");
  EXPECT_EQ(sink.str(sink.kernels[2].name), "bar()");
  EXPECT_EQ(sink.kernels[4].name, sink.kernels[0].name);
  EXPECT_EQ(conv.stats().kernel_names, 2);
  // The two names, not one string per kernel.
  EXPECT_EQ(static_cast<int>(sink.strings.size()) - interned_before, 2);
}

TEST(ApiNames, AskedOncePerCallbackId) {
  VectorSink sink;
  int asked = 0;
  ActivityConverter conv{sink, ConverterOptions{RankId(0), [&](schema::ApiKind, std::uint32_t cbid) {
                                                  ++asked;
                                                  return "call" + std::to_string(cbid);
                                                }}};
  for (int i = 0; i < 4; ++i) {
    const auto a = api_call(i == 3 ? CUPTI_ACTIVITY_KIND_DRIVER : CUPTI_ACTIVITY_KIND_RUNTIME, 211,
                            static_cast<std::uint32_t>(i + 1));
    conv.convert(as_activity(&a));
  }
  ASSERT_EQ(sink.apis.size(), 4u);
  EXPECT_EQ(sink.str(sink.apis[1].name), "call211");
  EXPECT_EQ(asked, 2);  // runtime 211 and driver 211
}

// A sink whose first kernel blocks until released: a conversion in progress.
struct BlockingSink final : VectorSink {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, released = false;
  void add(const instrument::KernelRecord& r) override {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
    VectorSink::add(r);
  }
  using VectorSink::add;
};

TEST(ConverterIntake, IssuerDoesNotWaitForAConversion) {
  BlockingSink sink;
  ConverterIntake intake(sink, ConverterOptions{});
  const auto c = correlation(42, 5);
  const auto k = kernel(1, 7, 42, 1000, 1500, "_Z3fooi");
  // CUPTI's thread: converts a buffer whose kernel write blocks.
  std::thread converter([&] {
    intake.with_converter([&](ActivityConverter& conv) {
      conv.convert(as_activity(&c));
      conv.convert(as_activity(&k));
    });
  });
  {
    std::unique_lock lock(sink.mu);
    sink.cv.wait(lock, [&] { return sink.entered; });
  }
  // The issuing thread, meanwhile: every announcement returns at once.
  auto issued = std::async(std::launch::async, [&] {
    intake.map_stream(1, 7, stream_record(3, 1, "compute"));
    intake.note_allocation(0x1000, BufferId(4));
    intake.note_op(gate_label(), 900, 950);
  });
  EXPECT_EQ(issued.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(intake.waiting(), 3u);
  {
    std::lock_guard lock(sink.mu);
    sink.released = true;
  }
  sink.cv.notify_all();
  converter.join();
  // The next use of the converter applies them first, in order.
  intake.with_converter([](ActivityConverter& conv) { conv.finish(); });
  EXPECT_EQ(intake.waiting(), 0u);
  ASSERT_EQ(sink.streams.size(), 2u);  // the kernel's unmapped stream, then the announced one
  ASSERT_EQ(sink.ops.size(), 1u);
  EXPECT_EQ(sink.ops[0].id.value, 5);
  EXPECT_EQ(sink.ops[0].start_ns, 1000);
  EXPECT_EQ(sink.ops[0].launch_start_ns, 900);
}

TEST(ConverterIntake, AnnouncementsReachTheConverterBeforeLaterBuffers) {
  VectorSink sink;
  ConverterIntake intake(sink, ConverterOptions{});
  intake.map_stream(1, 7, stream_record(3, 1, "compute"));
  intake.map_device(0, RankId(2));
  const auto c = correlation(42, 5);
  const auto k = kernel(1, 7, 42, 1000, 1500, "_Z3fooi");
  intake.with_converter([&](ActivityConverter& conv) {
    conv.convert(as_activity(&c));
    conv.convert(as_activity(&k));
  });
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_EQ(sink.kernels[0].stream.value, 3);
  EXPECT_EQ(sink.kernels[0].rank.value, 1);
}

TEST(CallbackGate, ShutWaitsForCallbacksInFlight) {
  int state = 7;
  CallbackGate<int> gate;
  gate.open(&state);
  std::promise<void> inside, leave;
  std::thread callback([&] {
    const auto pass = gate.enter();
    ASSERT_TRUE(pass);
    inside.set_value();
    leave.get_future().wait();
    *pass.get() = 8;  // still valid: shut() has not returned
  });
  inside.get_future().wait();
  auto shut = std::async(std::launch::async, [&] { gate.shut(); });
  EXPECT_EQ(shut.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  leave.set_value();
  shut.wait();
  callback.join();
  EXPECT_EQ(state, 8);
  EXPECT_FALSE(gate.enter());  // a late callback sees no collector
}

TEST(CallbackGate, CallbacksDoNotWaitForEachOther) {
  int state = 0;
  CallbackGate<int> gate;
  gate.open(&state);
  const auto held = gate.enter();
  auto other = std::async(std::launch::async, [&] { return gate.enter().get(); });
  ASSERT_EQ(other.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(other.get(), &state);
}

}  // namespace
}  // namespace moetrace::cupti
