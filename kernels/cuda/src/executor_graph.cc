// CUDA graph mode of the executor (ExecutorOptions::cuda_graph). Each graph
// (graph_segments, schedule.h: one iteration's steps) is captured from one
// stream: an event recorded on it forks every plan stream into the capture,
// the steps are issued as in the plain mode (waits, cudaMallocAsync and
// cudaFreeAsync become graph nodes, collectives too), each plan stream joins
// back, and the graph is instantiated and launched on that stream. The next
// graph is captured while the GPU runs this one, and starts after it.
//
// Every op's work is still issued inside its OpScope: the collector records
// the graph nodes made there as the op's, and CUPTI reports each kernel,
// copy and memset the launch runs with its node's id (activity_converter.h).
#include "executor_impl.h"

namespace moetrace::cuda {

using namespace exec;

namespace {

// Ends a capture an error interrupted, so the streams can be used (and
// destroyed) afterwards.
struct OpenCapture {
  cudaStream_t origin;
  bool open = true;
  ~OpenCapture() {
    if (!open) return;
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(origin, &g);
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();
  }
};

}  // namespace

void Executor::Impl::setup_graphs() {
  if (!opt_.cuda_graph) return;
  if (const std::string why = comm_->graph_capture_refusal(); !why.empty()) throw ConfigError(why);
  segments_ = graph_segments(plan_, order_);
  freed_segment_.assign(plan_.buffers.size(), -1);
  MOETRACE_CUDA_CHECK(cudaStreamCreateWithFlags(&graph_stream_, cudaStreamNonBlocking));
  MOETRACE_CUDA_CHECK(cudaEventCreateWithFlags(&graph_fork_, cudaEventDisableTiming));
  graph_join_.assign(streams_.size(), nullptr);
  for (std::size_t s = 0; s < streams_.size(); ++s)
    if (streams_[s] != nullptr) MOETRACE_CUDA_CHECK(cudaEventCreateWithFlags(&graph_join_[s], cudaEventDisableTiming));
}

void Executor::Impl::destroy_graphs() {
  release_graph_execs();
  for (cudaEvent_t e : graph_join_)
    if (e != nullptr) cudaEventDestroy(e);
  graph_join_.clear();
  if (graph_fork_ != nullptr) cudaEventDestroy(graph_fork_);
  if (graph_stream_ != nullptr) cudaStreamDestroy(graph_stream_);
  graph_fork_ = nullptr;
  graph_stream_ = nullptr;
}

void Executor::Impl::capture_graph(std::size_t first, std::size_t last) {
  // Thread-local: a call that cannot be captured (a synchronous copy, a
  // cudaMalloc) on this thread fails instead of running outside the graph.
  MOETRACE_CUDA_CHECK(cudaStreamBeginCapture(graph_stream_, cudaStreamCaptureModeThreadLocal));
  OpenCapture capture{graph_stream_};
  MOETRACE_CUDA_CHECK(cudaEventRecord(graph_fork_, graph_stream_));
  for (cudaStream_t s : streams_)
    if (s != nullptr) MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(s, graph_fork_, 0));
  for (std::size_t i = first; i < last; ++i) issue(order_[i]);
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (streams_[s] == nullptr) continue;
    MOETRACE_CUDA_CHECK(cudaEventRecord(graph_join_[s], streams_[s]));
    MOETRACE_CUDA_CHECK(cudaStreamWaitEvent(graph_stream_, graph_join_[s], 0));
  }
  capture.open = false;
  cudaGraph_t graph = nullptr;
  MOETRACE_CUDA_CHECK(cudaStreamEndCapture(graph_stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MOETRACE_CUDA_CHECK(instantiated);
  graph_execs_.push_back(exec);  // kept until the run's end, when every graph has run
  MOETRACE_CUDA_CHECK(cudaGraphLaunch(exec, graph_stream_));
}

void Executor::Impl::release_graph_execs() {
  for (cudaGraphExec_t e : graph_execs_) cudaGraphExecDestroy(e);
  graph_execs_.clear();
}

void Executor::Impl::issue_graphs(RunResult& result) {
  std::fill(freed_segment_.begin(), freed_segment_.end(), -1);
  const std::vector<std::size_t>& first = segments_.first_step;
  try {
    for (int g = 0; g < segments_.count(); ++g) {
      segment_ = g;
      const auto i = static_cast<std::size_t>(g);
      capture_graph(first[i], i + 1 < first.size() ? first[i + 1] : order_.size());
    }
  } catch (...) {
    segment_ = -1;
    throw;
  }
  segment_ = -1;
  result.graphs = segments_.count();
}

}  // namespace moetrace::cuda
