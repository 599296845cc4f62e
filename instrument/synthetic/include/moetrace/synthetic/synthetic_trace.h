// A synthetic MoE trace of any size: the shape of a real expert-parallel run
// (gate, permute, r-chunk pipelined dispatch all-to-all / expert FFN / combine
// all-to-all, unpermute, attention between MoE layers, forward and backward),
// with kernels attributed to their ops, launching API calls, buffers and
// expert load. It is made for benchmarks and for the default input of the
// main job; its timings are invented (fixed durations with seeded jitter) and
// the run is marked backend "synthetic" in the trace.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace moetrace::synthetic {

struct SyntheticConfig {
  int ranks = 4, layers = 4, iterations = 3;
  int chunks = 2;              // pipeline degree r of the MoE layers
  int experts_per_rank = 2;
  int kernels_per_op = 2;      // GPU kernels per op (each with a launching API call)
  bool api_calls = true;
  double zipf_skew = 0.8;      // expert-load skew
  std::uint64_t seed = 1;
  bool integrity_record = true;  // WriterOptions::integrity_record
};

// Number of timed events (ops, kernels, API calls, memory events) that
// `config` produces; used to size a run for a target event count.
std::int64_t synthetic_event_count(const SyntheticConfig& config);
// Iterations needed for about `events` events with the other fields as given.
int iterations_for_events(SyntheticConfig config, std::int64_t events);

struct SyntheticResult {
  std::int64_t events = 0;
  double seconds = 0;        // wall time from the first event to a closed trace
  double close_seconds = 0;  // of which finalizing after the last flush: indexes, checkpoint
};

// Writes the trace to `path` (replacing it). `progress(fraction)` is called
// now and then.
SyntheticResult write_synthetic_trace(const std::string& path, const SyntheticConfig& config,
                                      const std::function<void(double)>& progress = {});

}  // namespace moetrace::synthetic
