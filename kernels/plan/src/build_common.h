// Pieces every builder shares: parameter buffers, the gate, the dense part of
// a block, the optimizer step, FLOP counts and op names.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "moetrace/plan/config.h"
#include "moetrace/plan/flops.h"
#include "moetrace/plan/routing.h"
#include "plan_builder.h"

namespace moetrace::plan::detail {

// Attention heads of a model of width m: head dimension 128 where m allows
// it (GPT-3 175B: 12288 / 96 heads; LLaMA 2 7B: 4096 / 32), else 64 (GPT-2
// and BERT-base: 768 / 12), else one head of width m.
inline int attention_heads(std::int64_t m) {
  if (m >= 128 && m % 128 == 0) return static_cast<int>(m / 128);
  if (m >= 64 && m % 64 == 0) return static_cast<int>(m / 64);
  return 1;
}
// The attention op's work (plan.h AttentionWork) on `tokens` tokens of
// `input`: sequences of the model's length (one shorter sequence where the
// block has fewer tokens), this rank's share of the heads under tensor
// parallelism of degree tp. Its FLOPs are attention_forward_flops (x2 backward).
inline AttentionWork attention_work(View input, std::int64_t tokens, std::int64_t m, std::int64_t seq, int tp,
                                    bool backward) {
  AttentionWork w;
  w.input = input;
  w.model_dim = m;
  w.sequence_length = std::max<std::int64_t>(1, std::min(seq, tokens));
  w.sequences = (tokens + w.sequence_length - 1) / w.sequence_length;
  const int heads = attention_heads(m);
  w.head_dim = m / heads;
  w.heads = std::max(1, heads / std::max(tp, 1));
  w.backward = backward;
  return w;
}
// Adam touches each parameter about a dozen times; the executors apply SGD.
inline double optimizer_flops(std::int64_t elements) { return 12.0 * static_cast<double>(elements); }

inline Coords coords(int layer, int iteration, int micro_batch, int chunk, Phase phase) {
  return {.layer = layer, .iteration = iteration, .micro_batch = micro_batch, .chunk = chunk, .phase = phase};
}

// "L1.it0.mb2.dispatch_all_to_all.c1.bwd"
inline std::string op_name(const Coords& c, std::string_view what) {
  std::string s = fmt::format("L{}.it{}", c.layer, c.iteration);
  if (c.micro_batch >= 0) s += fmt::format(".mb{}", c.micro_batch);
  s += ".";
  s += what;
  if (c.chunk >= 0) s += fmt::format(".c{}", c.chunk);
  if (c.phase == Phase::kBackward) s += ".bwd";
  return s;
}

// An op's identity: kind, MoE coordinates, name (op_name of the coordinates
// and `what`), rank and stream; the caller adds work, data and buffers.
inline OpArgs op_at(OpKind kind, const Coords& co, std::string_view what, RankId rank, StreamId stream) {
  OpArgs a;
  a.kind = kind;
  a.coords = co;
  a.name = op_name(co, what);
  a.rank = rank;
  a.stream = stream;
  return a;
}

inline View whole(const PlanBuilder& b, BufferId id) {
  const Buffer& buf = const_cast<PlanBuilder&>(b).buffer(id);
  return View{id, 0, buf.rows};
}

struct ParamBuffers {
  BufferId params;
  BufferId grads;
  ParamSlice slice;
};

// A parameter tensor (slice) on a rank: parameters, gradients and two Adam
// moments, all persistent (mpipemoe Eq. 1: 4 copies).
ParamBuffers add_param(PlanBuilder& b, RankId rank, const ParamSlice& slice, std::int64_t rows,
                       int elem_bytes, const std::string& name);

// A transient buffer of a rank.
BufferId add_buffer(PlanBuilder& b, RankId rank, BufferTag tag, const std::string& name,
                    std::int64_t rows, std::int64_t cols, int elem_bytes, const Coords& c,
                    BufferBinding binding = {},
                    schema::MemoryKind memory = schema::MemoryKind::kDevice);

// Per-token buffers of one gate invocation.
struct GateBuffers {
  BufferId probs, routing;
};

// The three streams every rank uses.
struct RankStreams {
  StreamId compute, comm, copy;
};

// Emits SGD steps for a list of parameters of one rank at the end of an iteration.
void add_sgd(PlanBuilder& b, RankId rank, StreamId stream, const ParamBuffers& p, int iteration,
             double learning_rate);

// Checks that `load` matches the configuration; throws ConfigError naming the field.
void check_load(const ExpertLoad& load, const ModelShape& m, int iterations, int sources,
                const char* sources_field);

}  // namespace moetrace::plan::detail
