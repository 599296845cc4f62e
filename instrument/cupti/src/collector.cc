#include "moetrace/cupti/collector.h"

#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "moetrace/cupti/activity_converter.h"
#include "moetrace/cupti/api_filter.h"
#include "moetrace/cupti/buffer_pool.h"
#include "moetrace/cupti/callback_gate.h"
#include "moetrace/cupti/check.h"
#include "moetrace/cupti/converter_intake.h"
#include "moetrace/schema/error.h"

namespace moetrace::cupti {

namespace {
std::atomic<Collector*> g_active{nullptr};
CallbackGate<Collector::Impl> g_gate;
std::once_flag g_atexit_once;
// The op whose OpScope is open on this thread: a graph node CUDA creates
// while a stream is captured belongs to it.
thread_local OpId t_current_op;

void close_at_exit() {
  if (Collector* c = g_active.load()) {
    try {
      c->close();
    } catch (...) {
      // Exiting: nothing left to report to.
    }
  }
}

// NVTX ranges reach CUPTI only through NVTX's injection hook, read once at the
// first NVTX call of the process: point it at the CUPTI library we run with.
void hook_nvtx_into_cupti() {
  if (std::getenv("NVTX_INJECTION64_PATH") != nullptr) return;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuptiActivityEnable), &info) != 0 && info.dli_fname != nullptr)
    setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
}

nvtxDomainHandle_t moetrace_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA(kNvtxDomain);
  return d;
}

std::uint32_t category_color(Category c) {
  switch (c) {
    case Category::kAllToAll: return 0xFFE6550D;
    case Category::kAllReduce: return 0xFFFD8D3C;
    case Category::kOtherComm: return 0xFFFDAE6B;
    case Category::kExpertCompute: return 0xFF3182BD;
    case Category::kGating: return 0xFF31A354;
    case Category::kOtherCompute: return 0xFF6BAED6;
    case Category::kMemcpy: return 0xFF756BB1;
  }
  return 0xFF969696;
}

}  // namespace

struct Collector::Impl {
  std::unique_ptr<instrument::TraceWriter> writer;
  CollectorOptions options;
  WriterSink sink;
  // The issuing thread announces into it without waiting for conversions;
  // buffers are converted under its own lock (converter_intake.h).
  ConverterIntake intake;
  ActivityBufferPool pool;
  std::vector<CUpti_ActivityKind> enabled;
  std::atomic<std::int64_t> buffers_completed{0}, records{0}, dropped{0};
  CUpti_SubscriberHandle subscriber = nullptr;  // graph node callbacks, where CUPTI allows
  bool closed = false;
  std::mutex close_mu;

  Impl(std::unique_ptr<instrument::TraceWriter> w, CollectorOptions o)
      : writer(std::move(w)),
        options(o),
        sink(*writer),
        intake(sink, ConverterOptions{o.default_rank, &api_name}),
        pool(o.buffer_bytes, o.max_buffers) {
    pool.reserve(o.reserved_buffers);
  }

  // Called once per (kind, callback id): the converter keeps the names.
  static std::string api_name(schema::ApiKind kind, std::uint32_t cbid) {
    const char* name = nullptr;
    const auto domain = kind == schema::ApiKind::kRuntime ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                          : CUPTI_CB_DOMAIN_DRIVER_API;
    return cuptiGetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && name != nullptr ? std::string(name)
                                                                                         : std::string();
  }

  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size,
                                        std::size_t* max_records) {
    const auto pass = g_gate.enter();
    Impl* self = pass.get();
    *max_records = 0;
    *buffer = self != nullptr ? self->pool.acquire() : nullptr;
    *size = *buffer != nullptr ? self->pool.buffer_bytes() : 0;
  }

  // Graph nodes: made during stream capture (inside an op's scope) and cloned
  // by cudaGraphInstantiate. Kernels, copies and memsets a graph launches
  // carry the launch's correlation id and their node's id (graphNodeId), so
  // the node is how they find their op (activity_converter.h). Runs on the
  // thread that captures or instantiates.
  static void CUPTIAPI graph_node_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                           const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || data == nullptr) return;
    const auto pass = g_gate.enter();
    Impl* self = pass.get();
    if (self == nullptr) return;
    const auto* resource = static_cast<const CUpti_ResourceData*>(data);
    const auto* graph = static_cast<const CUpti_GraphData*>(resource->resourceDescriptor);
    if (graph == nullptr) return;
    std::uint64_t node = 0, original = 0;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
      if (t_current_op.valid() && cuptiGetGraphNodeId(graph->node, &node) == CUPTI_SUCCESS)
        self->intake.note_graph_node(node, t_current_op);
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
      if (cuptiGetGraphNodeId(graph->node, &node) == CUPTI_SUCCESS &&
          cuptiGetGraphNodeId(graph->originalNode, &original) == CUPTI_SUCCESS)
        self->intake.note_graph_node_clone(node, original);
    }
  }

  // Subscribes to the graph node callbacks; a CUPTI that refuses (another
  // subscriber) leaves graph-launched activities to their correlation ids.
  void subscribe_graph_nodes() {
    if (cuptiSubscribe(&subscriber, &graph_node_callback, nullptr) !=
        CUPTI_SUCCESS) {
      subscriber = nullptr;
      return;
    }
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
  }
  void unsubscribe_graph_nodes() {
    if (subscriber != nullptr) cuptiUnsubscribe(subscriber);
    subscriber = nullptr;
  }

  static void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream_id, std::uint8_t* buffer,
                                        std::size_t /*size*/, std::size_t valid) {
    // The pass is held to the end, so close() cannot finish the trace, close
    // the writer or free the pool under this callback. A buffer completed
    // after close() belonged to the pool and is left alone.
    const auto pass = g_gate.enter();
    Impl* self = pass.get();
    if (self == nullptr || buffer == nullptr) return;
    const std::int64_t n = self->intake.with_converter([&](ActivityConverter& converter) {
      std::int64_t count = 0;
      CUpti_Activity* record = nullptr;
      while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        try {
          converter.convert(record);
        } catch (...) {
          // A record we cannot write must not take the traced process down.
        }
        ++count;
      }
      return count;
    });
    std::size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped > 0) {
      self->dropped += static_cast<std::int64_t>(dropped);
      self->writer->add_dropped_records(static_cast<std::int64_t>(dropped));
    }
    self->records += n;
    ++self->buffers_completed;
    self->pool.release(buffer);
  }
};

Collector::Collector(std::unique_ptr<instrument::TraceWriter> writer, CollectorOptions options) {
  if (!writer) throw Error("CUPTI collector: no trace writer");
  Collector* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, this))
    throw Error("CUPTI collector: another collector is already active in this process");
  try {
    // CUPTI without a usable device fails with CUPTI_ERROR_UNKNOWN; say why instead.
    int devices = 0;
    const cudaError_t probe = cudaGetDeviceCount(&devices);
    if (probe != cudaSuccess) {
      cudaGetLastError();
      throw Error(fmt::format("CUPTI collector: no usable GPU ({})", detail::cuda_error_text(probe)));
    }
    impl_ = std::make_unique<Impl>(std::move(writer), options);
    if (options.nvtx) hook_nvtx_into_cupti();
    g_gate.open(impl_.get());
    const CUptiResult reg = cuptiActivityRegisterCallbacks(&Impl::buffer_requested, &Impl::buffer_completed);
    if (reg == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      throw Error("CUPTI is already in use by another profiler (Nsight Systems or Compute?); "
                  "run without it to record a moetrace trace");
    detail::check_cupti(reg, "cuptiActivityRegisterCallbacks", __FILE__, __LINE__);
    std::vector<CUpti_ActivityKind> kinds{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                          CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                          CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
    if (options.runtime_api) kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
    if (options.driver_api) kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
    if (options.memory) kinds.push_back(CUPTI_ACTIVITY_KIND_MEMORY2);
    if (options.synchronization) kinds.push_back(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    if (options.overhead) kinds.push_back(CUPTI_ACTIVITY_KIND_OVERHEAD);
    if (options.nvtx) {
      kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER);
      kinds.push_back(CUPTI_ACTIVITY_KIND_MARKER_DATA);
    }
    for (CUpti_ActivityKind k : kinds) {
      const CUptiResult r = cuptiActivityEnable(k);
      if (r == CUPTI_ERROR_NOT_COMPATIBLE || r == CUPTI_ERROR_NOT_SUPPORTED) continue;
      detail::check_cupti(r, fmt::format("cuptiActivityEnable(activity kind {})", static_cast<int>(k)).c_str(),
                          __FILE__, __LINE__);
      impl_->enabled.push_back(k);
    }
    // After the kinds: enabling CUPTI_ACTIVITY_KIND_RUNTIME / _DRIVER resets
    // the per-call settings. A CUPTI that cannot turn one call off keeps
    // recording it (only time is lost).
    if (!options.query_api) {
      if (options.runtime_api)
        for (CUpti_CallbackId id : query_runtime_api()) cuptiActivityEnableRuntimeApi(id, 0);
      if (options.driver_api)
        for (CUpti_CallbackId id : query_driver_api()) cuptiActivityEnableDriverApi(id, 0);
    }
    impl_->subscribe_graph_nodes();
    std::call_once(g_atexit_once, [] { std::atexit(close_at_exit); });
  } catch (...) {
    if (impl_) {
      for (CUpti_ActivityKind k : impl_->enabled) cuptiActivityDisable(k);
      impl_->unsubscribe_graph_nodes();
    }
    g_gate.shut();
    g_active.store(nullptr);
    throw;
  }
}

Collector::~Collector() {
  try {
    close();
  } catch (...) {
    // Errors are reported by an explicit close().
  }
}

instrument::TraceWriter& Collector::writer() { return *impl_->writer; }

void Collector::map_stream(void* cuda_stream, const instrument::StreamRecord& record) {
  using GetCtx = CUresult (*)(CUstream, CUcontext*);
  static GetCtx get_ctx = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuStreamGetCtx", &fn, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<GetCtx>(fn);
  }();
  if (get_ctx == nullptr) throw Error("CUPTI collector: cuStreamGetCtx is not available from the driver");
  auto stream = static_cast<CUstream>(cuda_stream);
  CUcontext ctx = nullptr;
  if (get_ctx(stream, &ctx) != CUDA_SUCCESS)
    throw Error(fmt::format("CUPTI collector: cannot find the context of stream {}", record.name));
  std::uint32_t ctx_id = 0, stream_id = 0;
  MOETRACE_CUPTI_CHECK(cuptiGetContextId(ctx, &ctx_id));
  MOETRACE_CUPTI_CHECK(cuptiGetStreamIdEx(nullptr, stream, 0, &stream_id));
  impl_->intake.map_stream(ctx_id, stream_id, record);
}

void Collector::map_device(int device, RankId rank) {
  impl_->intake.map_device(static_cast<std::uint32_t>(device), rank);
}

void Collector::note_allocation(std::uint64_t address, BufferId buffer) {
  impl_->intake.note_allocation(address, buffer);
}

void Collector::note_op(const OpLabel& label, std::int64_t launch_start, std::int64_t launch_end) {
  impl_->intake.note_op(label, launch_start, launch_end);
}

void Collector::note_waits(OpId op, std::vector<OpId> waits_for) {
  impl_->intake.note_waits(op, std::move(waits_for));
}

void Collector::flush() { MOETRACE_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)); }

void Collector::close() {
  std::lock_guard close_lock(impl_->close_mu);
  if (impl_->closed) return;
  impl_->closed = true;
  // Flush before and after disabling: records of the last kernels may still be
  // in flight when the first flush runs.
  const CUptiResult first = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  CUptiResult disabled = CUPTI_SUCCESS;
  for (CUpti_ActivityKind k : impl_->enabled)
    if (const CUptiResult r = cuptiActivityDisable(k); r != CUPTI_SUCCESS) disabled = r;
  impl_->unsubscribe_graph_nodes();
  const CUptiResult second = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  // Waits for a callback still converting on CUPTI's thread; later ones see
  // no collector. Only then is the trace finished and the writer closed.
  g_gate.shut();
  g_active.store(nullptr);
  impl_->intake.with_converter([](ActivityConverter& c) { c.finish(); });
  // The trace is written whatever CUPTI said; then report what went wrong.
  impl_->writer->close();
  detail::check_cupti(first, "cuptiActivityFlushAll", __FILE__, __LINE__);
  detail::check_cupti(disabled, "cuptiActivityDisable", __FILE__, __LINE__);
  detail::check_cupti(second, "cuptiActivityFlushAll (after disabling)", __FILE__, __LINE__);
}

CollectorStats Collector::stats() const {
  const ConverterStats c = impl_->intake.with_converter([](ActivityConverter& conv) { return conv.stats(); });
  return {.buffers_completed = impl_->buffers_completed.load(), .records = impl_->records.load(),
          .dropped_records = impl_->dropped.load(),
          .buffers_refused = static_cast<std::int64_t>(impl_->pool.stats().refused), .kernels = c.kernels,
          .memcpys = c.memcpys, .op_ranges = c.op_ranges, .nvtx_ranges = c.nvtx_ranges,
          .activities_without_op = c.activities_without_op, .graph_activities = c.graph_activities};
}

std::int64_t Collector::timestamp_ns() {
  std::uint64_t t = 0;
  if (cuptiGetTimestamp(&t) != CUPTI_SUCCESS) return 0;
  return static_cast<std::int64_t>(t);
}

Collector* Collector::active() { return g_active.load(); }

OpScope::OpScope(const OpLabel& label) : label_(label), outer_(t_current_op) {
  t_current_op = label.op;
  const std::string message = format_op_message(label);
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = static_cast<std::uint32_t>(label.kind);
  a.colorType = NVTX_COLOR_ARGB;
  a.color = category_color(op_category(label.kind));
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = label.op.value;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message.c_str();
  nvtxDomainRangePushEx(moetrace_domain(), &a);
  if (Collector::active() != nullptr) {
    start_ = Collector::timestamp_ns();
    correlated_ = cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                         static_cast<std::uint64_t>(label.op.value)) ==
                  CUPTI_SUCCESS;
  }
}

OpScope::~OpScope() {
  if (correlated_) {
    std::uint64_t last = 0;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  }
  nvtxDomainRangePop(moetrace_domain());
  t_current_op = outer_;
  if (Collector* c = Collector::active()) c->note_op(label_, start_, Collector::timestamp_ns());
}

}  // namespace moetrace::cupti
