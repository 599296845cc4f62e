#include "build_common.h"

#include "moetrace/schema/error.h"

namespace moetrace::plan::detail {

ParamBuffers add_param(PlanBuilder& b, RankId rank, const ParamSlice& slice, std::int64_t rows,
                       int elem_bytes, const std::string& name) {
  ParamBuffers p;
  p.slice = slice;
  auto make = [&](BufferTag tag, BufferBinding::Kind kind, const std::string& suffix) {
    Buffer buf;
    buf.rank = rank;
    buf.tag = tag;
    buf.name = name + suffix;
    buf.rows = rows;
    buf.cols = slice.cols;
    buf.elem_bytes = elem_bytes;
    buf.layer = slice.layer;
    buf.persistent = true;
    buf.binding.kind = kind;
    buf.binding.param = slice;
    return b.add_buffer(std::move(buf));
  };
  p.params = make(BufferTag::kParams, BufferBinding::Kind::kParam, ".params");
  p.grads = make(BufferTag::kGrads, BufferBinding::Kind::kGrad, ".grads");
  make(BufferTag::kOptimizer, BufferBinding::Kind::kOptimizerState, ".adam_m");
  make(BufferTag::kOptimizer, BufferBinding::Kind::kOptimizerState, ".adam_v");
  return p;
}

BufferId add_buffer(PlanBuilder& b, RankId rank, BufferTag tag, const std::string& name,
                    std::int64_t rows, std::int64_t cols, int elem_bytes, const Coords& c,
                    BufferBinding binding, schema::MemoryKind memory) {
  return b.add_buffer(Buffer{.rank = rank, .tag = tag, .name = name, .rows = rows, .cols = cols,
                             .elem_bytes = elem_bytes, .memory = memory, .layer = c.layer,
                             .iteration = c.iteration, .micro_batch = c.micro_batch, .chunk = c.chunk,
                             .binding = binding});
}

void add_sgd(PlanBuilder& b, RankId rank, StreamId stream, const ParamBuffers& p, int iteration,
             double learning_rate) {
  const Buffer& buf = b.buffer(p.params);
  OpArgs a;
  a.kind = OpKind::kOptimizer;
  a.coords = coords(p.slice.layer, iteration, -1, -1, Phase::kOther);
  a.name = fmt::format("L{}.it{}.optimizer.{}", p.slice.layer, iteration, buf.name);
  a.rank = rank;
  a.stream = stream;
  a.flops = optimizer_flops(buf.elements());
  a.data = SgdStep{p.params, p.grads, p.slice, learning_rate};
  b.add(std::move(a));
}

void check_load(const ExpertLoad& load, const ModelShape& m, int iterations, int sources,
                const char* sources_field) {
  load.validate();
  auto mismatch = [](const char* what, int have, const char* field, int want) {
    throw ConfigError(fmt::format("expert load has {} {}, but {} is {}", have, what, field, want));
  };
  if (load.iterations != iterations) mismatch("iterations", load.iterations, "iterations", iterations);
  if (load.layers != m.num_layers) mismatch("layers", load.layers, "num_layers", m.num_layers);
  if (load.experts != m.num_experts) mismatch("experts", load.experts, "num_experts", m.num_experts);
  if (load.top_k != m.top_k) mismatch("top_k", load.top_k, "top_k", m.top_k);
  if (load.sources != sources) mismatch("sources", load.sources, sources_field, sources);
}

}  // namespace moetrace::plan::detail
