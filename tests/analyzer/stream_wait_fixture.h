// A hand-written Kineto trace of one cross-stream wait, with and without
// the "Stream Wait Event" record that names its event (for the replay's and
// the critical path's tests).
#pragma once

#include <string>

namespace moetrace::testing {

// One thread (pid 4242) issuing onto three CUDA streams of device 0 (us):
//   corr 11 cudaLaunchKernel   [0,10]  -> P on stream 7   [15,315]
//   corr 12 cudaEventRecord    [20,22]    (the event, recorded on stream 7)
//   corr 13 cudaLaunchKernel   [30,40] -> E on stream 21  [45,316]
//   corr 14 cudaStreamWaitEvent [50,52]   (stream 13 waits for the event)
//   corr 15 cudaLaunchKernel   [60,70] -> C on stream 13  [318,368]
// C waited for P (launched before the record), not for E, though E ended
// last before C started: a wait inferred from the timeline picks E.
// The stream names (7, 13, 21) and the record's spelling are Kineto's
// (libkineto CudaSyncActivity: "Stream Wait Event", args "wait_on_stream",
// "wait_on_cuda_event_record_corr_id", "wait_on_cuda_event_id").
inline std::string stream_wait_events(bool with_record) {
  std::string e = R"J(
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 0, "dur": 10,
     "args": {"correlation": 11}},
    {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>()", "pid": 0,
     "tid": 7, "ts": 15, "dur": 300, "args": {"correlation": 11, "device": 0, "stream": 7}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": 4242, "tid": 4242, "ts": 20, "dur": 2,
     "args": {"correlation": 12}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 30, "dur": 10,
     "args": {"correlation": 13}},
    {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, "tid": 21, "ts": 45,
     "dur": 271, "args": {"correlation": 13, "device": 0, "stream": 21}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 4242, "tid": 4242, "ts": 50,
     "dur": 2, "args": {"correlation": 14}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 60, "dur": 10,
     "args": {"correlation": 15}},
    {"ph": "X", "cat": "kernel", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 13, "ts": 318,
     "dur": 50, "args": {"correlation": 15, "device": 0, "stream": 13}})J";
  if (with_record)
    e += R"J(,
    {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 13, "ts": 50, "dur": 0,
     "args": {"cuda_sync_kind": "Stream Wait Event", "correlation": 14, "device": 0, "context": 1, "stream": 13,
              "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 12, "wait_on_cuda_event_id": 3}})J";
  return e;
}

}  // namespace moetrace::testing
