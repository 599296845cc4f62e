// Every plan op the CUDA executor issues is an NVTX range in domain
// "moetrace" whose message carries the op's identity and MoE coordinates, so
// the collector (or Nsight Systems, or anyone reading the NVTX ranges) can
// rebuild the op range from the range alone:
//   "L1.it0.dispatch_all_to_all.c1 {op=17 rank=0 stream=1 kind=dispatch_all_to_all
//    layer=1 it=0 mb=-1 chunk=1 phase=fwd flops=0 bytes=4096 peer=-1}"
// The readable op name comes first (what a timeline shows); the braces hold
// key=value pairs. The range's int64 payload is the op id too. No CUDA here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moetrace/schema/ids.h"
#include "moetrace/schema/op_kind.h"

namespace moetrace::cupti {

inline constexpr const char* kNvtxDomain = "moetrace";

struct OpLabel {
  std::string name{};
  OpId op{};
  RankId rank{};
  StreamId stream{};
  OpKind kind = OpKind::kOtherOp;
  int layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  Phase phase = Phase::kForward;
  double flops = -1;
  std::int64_t bytes = -1;
  std::int64_t recv_bytes = -1;  // an all-to-all's bytes received from the other ranks; -1: unknown
  RankId peer{};

  bool operator==(const OpLabel&) const = default;
};

std::string format_op_message(const OpLabel& label);
// nullopt where `message` is not one of ours (a user's NVTX range).
std::optional<OpLabel> parse_op_message(std::string_view message);

}  // namespace moetrace::cupti
