// NVTX-to-GPU projection: which op launched each kernel, memcpy and memset.
//
// A GPU activity runs later than the host code that launched it, often much
// later and on another stream, so the host-side op ranges (NVTX) say nothing
// about where GPU time goes. CUPTI links each activity to its launching API
// call by a correlation id; the API call ran on a host thread inside the op's
// host range. The projection follows that chain:
//
//   activity --(correlation id, same rank)--> API call
//            --(same rank and thread, time inside)--> innermost op host range
//
// An op's host range is [launch_start_ns, launch_end_ns] of its op_ranges row,
// or, where that is absent, the NVTX range that names the op: the op's
// nvtx_id, or an NVTX range of domain "moetrace" whose payload_int is the op
// id. The thread of an op's host range is that of its NVTX range; an op with
// a launch range but no NVTX range matches API calls of any thread of its
// rank. "Innermost" is the containing range that started last (nested ranges
// on one thread), which is the range open at the moment of the call.
//
// Activities that the trace already attributes (op_id) keep their op. After
// the projection, op ranges of GPU runs (run not simulated) that own
// activities get the GPU span of those activities as their start/end, so
// every analysis sees GPU time, not launch time. The loader runs this by
// default (LoadOptions::project); the breakdown then counts each activity for
// its op.
#pragma once

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// Attributes activities in place, re-times GPU-run ops, and records what it
// did in trace.projection (also returned). Running it again changes no
// attribution.
ProjectionStats project_activities(Trace& trace);

}  // namespace moetrace::analyzer
