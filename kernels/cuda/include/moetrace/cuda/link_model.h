// The link model of the emulated communicator: P virtual ranks share one GPU,
// and their all-to-all and all-reduce are real copy/reduce kernels that pace
// themselves to a modelled network (alpha-beta: a latency per transfer plus
// bytes over a per-rank bandwidth, as pipemoe Eq. 6 and mpipemoe Eq. 8 model
// communication) and occupy a bounded number of SMs, so the overlap of
// communication with computation and the SMs it takes from the experts are
// real, not simulated. No CUDA here: the formulas are unit-tested on the CPU
// and the device code calls the same inline functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/cuda/device_math.h"

namespace moetrace::cuda {

struct LinkModel {
  double latency_us = 10.0;        // alpha of one transfer of one rank
  double bandwidth_gb_s = 50.0;    // bytes per ns per rank (GB/s = 1e9 B/s), each direction
  int sms = 8;                     // thread blocks (one per SM) of one rank's copy kernel
  std::int64_t piece_bytes = 64 * 1024;  // granularity of the pacing

  // Throws moetrace::ConfigError naming the field ("link bandwidth_gb_s (0) must be positive").
  void validate() const;
  // alpha + bytes / beta-bar, in ns: the modelled time of a rank moving `bytes`.
  double transfer_ns(std::int64_t bytes) const;
};

// "latency_us=5,bandwidth_gb_s=100,sms=16,piece_bytes=65536"; keys may be
// omitted (defaults above); throws ConfigError naming the key for unknown
// keys or bad values.
LinkModel parse_link_model(std::string_view spec);
std::string to_string(const LinkModel& m);

// The pacing of one rank's paced bytes under model m (device_math.h).
PaceParams pace_params(const LinkModel& m, std::int64_t paced_bytes);

// The modelled finish time (ns after the start) of a paced transfer: the
// slowest block's last deadline.
std::int64_t paced_finish_ns(const PaceParams& p, std::int64_t paced_bytes);

// Bytes a rank moves in each of the two phases of the emulated all-reduce
// (reduce-scatter, then all-gather, as a ring all-reduce moves them):
// (P - 1) / P of the buffer per phase.
std::int64_t all_reduce_phase_bytes(std::int64_t bytes, int ranks);

// The pacing of a paced reduce that sums `slice_bytes` of its own with the
// same slice of `remote` peers (paced_reduce_kernel): the blocks share the
// slice's pieces and each piece paces its bytes from every remote peer, so
// the blocks are sized by the slice, not by the remote x slice bytes paced
// (sized by those, most blocks of a reduce-scatter had no piece and the
// others paced at their fraction of the bandwidth).
PaceParams reduce_pace_params(const LinkModel& m, std::int64_t slice_bytes);
// Its modelled finish time (ns after the start), as the kernel's blocks
// reach their deadlines: alpha + remote x slice_bytes / beta, up to a piece.
std::int64_t paced_reduce_finish_ns(const PaceParams& p, std::int64_t slice_bytes, int remote);

// The barrier the emulated ranks' streams pass before and after a
// collective: every stream records an event, the first stream waits for all
// others and records one more, which the others wait for. 2 (n - 1) waits,
// not n (n - 1) (4,032 per barrier at 64 ranks), with the same ordering:
// each stream's later work follows every stream's earlier work.
struct BarrierStep {
  enum class Kind : std::uint8_t { kRecord, kWait };
  Kind kind;
  int stream;  // index into the collective's ops
  int event;   // index into the communicator's events; n + 1 of them
};
std::vector<BarrierStep> barrier_steps(int streams);

}  // namespace moetrace::cuda
