// Layer instances of overlapped schedules: a DualPipe-shaped pair of a
// forward chunk (layers 0..n-1 of one micro-batch) and a backward chunk
// (layers n-1..0 of another, its backward split in B and W), run layer pair
// by layer pair. The part names come from public sources, not from our
// rules: the component names of the DeepSeek-V3 technical report's Figure 4
// ("ATTN (F)", "DISPATCH (F)", "MLP (B)", "MLP (W)", "COMBINE (B)"; arXiv
// 2412.19437) and Megatron-Core's schedule-node ranges (f"{name} forward",
// f"{name} backward", f"{name} wgrad" of the nodes attn, moe_dispatch, mlp,
// moe_combine: megatron/core/pipeline_parallel/utils.py,
// megatron/core/models/gpt/fine_grained_callables.py). The function ranges
// are DualPipe's (deepseek-ai/DualPipe dualpipe/dualpipe.py:
// _forward_backward_compute_chunk, which calls the model's
// overlapped_forward_backward; _weight_chunk, which calls
// WeightGradStore.pop in dualpipe/utils.py).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kineto_fixture.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::testing {
namespace {

constexpr const char* kGemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas";
// DeepEP's kernels (deepseek-ai/DeepEP csrc/kernels/intranode.cu): the
// backward of a combine is a dispatch and vice versa.
constexpr const char* kDeepEpDispatch =
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, "
    "float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, int, void**, "
    "int, int, int)";
constexpr const char* kDeepEpCombine =
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, __nv_bfloat16 const*, "
    "float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, int const*, int const*, int, int, int, "
    "int, int, void**, int, int, int)";

// The part names of one naming: attention, dispatch, experts, combine, each
// with a phase marker.
struct Names {
  const char* label;
  std::string (*part)(const char* what, char phase);  // what: attn, dispatch, mlp, combine; phase: F, B, W
};

std::string figure4(const char* what, char phase) {  // DeepSeek-V3 report, Figure 4: "MLP (W)"
  std::string w(what);
  for (auto& ch : w) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return fmt::format("{} ({})", w, phase);
}
std::string megatron(const char* what, char phase) {  // Megatron-Core: "moe_dispatch forward", "mlp wgrad"
  const std::string w(what);
  const std::string node = w == "dispatch" || w == "combine" ? "moe_" + w : w;
  return node + (phase == 'F' ? " forward" : phase == 'B' ? " backward" : " wgrad");
}

enum class Nesting {
  kLayerPairs,     // chunk pair > overlapped_forward_backward > one function per layer pair > parts
  kFlat,           // chunk pair > overlapped_forward_backward > parts
};
enum class Leading {
  kInPair,         // the backward chunk's first combine(B) inside the first layer pair's function
  kBeforePairs,    // ... in overlapped_forward_backward, before the first layer pair's function
  kBeforeChunk,    // ... before the chunk pair's function, under the profiler step
};

struct Shape {
  const char* name;
  int layers;  // n
  Names names;
  Nesting nesting;
  Leading leading;
  bool deep_ep;
};

// GPU time of layer pair p of chunk pair c (us): o = 100 + 100 (n c + p).
double offset(const Shape& s, int c, int p) { return 100.0 + 100.0 * (s.layers * c + p); }

// The parts of a layer pair in launch order, each with its kernel:
// (what, phase, stream, GPU start relative to o, duration).
struct PartSpec {
  const char* what;
  char phase;
  int stream;
  double at, dur;
};
const PartSpec kPairParts[] = {
    {"combine", 'B', 14, 0, 10},  {"attn", 'F', 7, 0, 10},      {"dispatch", 'F', 13, 10, 10},
    {"mlp", 'B', 8, 10, 15},      {"mlp", 'W', 8, 25, 10},      {"mlp", 'F', 7, 20, 15},
    {"dispatch", 'B', 14, 35, 10}, {"combine", 'F', 13, 35, 10}, {"attn", 'B', 8, 45, 10},
    {"attn", 'W', 8, 55, 10},
};

std::string kernel_of(const Shape& s, const PartSpec& part) {
  const std::string w(part.what);
  if (w == "attn" || w == "mlp") return kGemm;
  if (!s.deep_ep) return kA2a;
  // The backward of a combine sends like a dispatch.
  const bool dispatch_like = (w == "dispatch") == (part.phase == 'F');
  return dispatch_like ? kDeepEpDispatch : kDeepEpCombine;
}

// Two chunk pairs (micro-batches 0 and 1 of each phase) in one profiler step.
std::string write_shape(const Shape& s) {
  Kineto k;
  const int n = s.layers;
  const double chunk_span = 20.0 + 60.0 * n;
  k.range("ProfilerStep#2", 0, 2 * chunk_span + 100, 1, "user_annotation");
  for (int c = 0; c < 2; ++c) {
    const double hc = 10 + (chunk_span + 20) * c;  // host time of the chunk pair's function
    if (s.leading == Leading::kBeforeChunk) {
      const auto& part = kPairParts[0];
      k.range(s.names.part(part.what, part.phase), hc - 6, 4, 1, "user_annotation");
      k.kernel(kernel_of(s, part), part.stream, offset(s, c, 0) + part.at, part.dur, hc - 5.5);
    }
    k.range("dualpipe/dualpipe.py(126): _forward_backward_compute_chunk", hc, chunk_span, 1, "python_function");
    k.range("deepseek_v3/model.py(412): overlapped_forward_backward", hc + 2, chunk_span - 4, 1, "python_function");
    for (int p = 0; p < n; ++p) {
      const double hp = hc + 10 + 60.0 * p;
      if (s.nesting == Nesting::kLayerPairs)
        k.range("deepseek_v3/model.py(377): forward_backward_layer_pair", hp, 56, 1, "python_function");
      for (std::size_t i = 0; i < std::size(kPairParts); ++i) {
        const auto& part = kPairParts[i];
        double at = hp + 1 + 5.0 * static_cast<double>(i);
        if (i == 0 && p == 0 && s.leading != Leading::kInPair) {
          if (s.leading == Leading::kBeforeChunk) continue;  // written above
          at = hc + 4;  // in overlapped_forward_backward, before the first pair's function
        }
        k.range(s.names.part(part.what, part.phase), at, 4, 1, "user_annotation");
        k.kernel(kernel_of(s, part), part.stream, offset(s, c, p) + part.at, part.dur, at + 0.5);
      }
    }
  }
  return k.write(std::string("dualpipe_") + s.name + ".json");
}

const Shape kShapes[] = {
    {"figure4_pairs_nccl", 4, {"figure4", figure4}, Nesting::kLayerPairs, Leading::kBeforePairs, false},
    {"megatron_flat_deepep", 3, {"megatron", megatron}, Nesting::kFlat, Leading::kInPair, true},
    {"figure4_flat_leading_outside", 3, {"figure4", figure4}, Nesting::kFlat, Leading::kBeforeChunk, false},
    {"megatron_pairs_deepep", 2, {"megatron", megatron}, Nesting::kLayerPairs, Leading::kBeforePairs, true},
};

// The op of the kernel that started at `us` on `stream`.
const analyzer::OpRange* op_on(const analyzer::Trace& t, int stream, double us) {
  for (const auto& a : t.activities)
    if (a.start_ns == static_cast<std::int64_t>(us * 1000) && a.op >= 0 &&
        t.streams.at(static_cast<std::size_t>(a.stream)).native_id == stream)
      return &t.ops[static_cast<std::size_t>(a.op)];
  return nullptr;
}

class DualPipeShaped : public ::testing::TestWithParam<Shape> {};

// By hand, for layer pair p of chunk pair c at o = 100 + 100 (n c + p):
// - forward layer p, micro-batch c: dispatch [o+10,o+20], experts
//   [o+20,o+35], combine [o+35,o+45]: instance window [o+10,o+45], 35 us;
// - backward layer n-1-p, micro-batch c: combine [o,o+10], experts
//   [o+10,o+25], dispatch [o+35,o+45]: window [o,o+45], 45 us;
// - its W: experts [o+25,o+35], 10 us;
// - attention is no MoE-layer work.
// Layer l's time in the iteration is the union of its instances: forward in
// pair l, backward in pair n-1-l of each chunk pair, so 2 x (35 + 45) =
// 160 us, except the middle layer of an odd n (l = n-1-l), whose forward
// window lies inside its backward one: 2 x 45 = 90 us. The iteration runs
// from 100 to the last attention W kernel, o + 65 of the last pair.
TEST_P(DualPipeShaped, EachLayerHasItsOwnInstancesAndWindows) {
  const auto& s = GetParam();
  const int n = s.layers;
  const auto t = import_and_load({write_shape(s)}, temp_path(std::string("dualpipe_") + s.name + ".db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_TRUE(t.recognition.ambiguities.empty()) << t.recognition.ambiguities.front();
  // Every MoE op of the trace, by its instance (layer, micro-batch, phase):
  // its GPU envelope.
  std::map<std::tuple<int, int, Phase>, std::pair<std::int64_t, std::int64_t>> instances;
  int moe_ops = 0;
  for (const auto& op : t.ops) {
    if (!op_kind_info(op.kind).moe_layer) {
      EXPECT_EQ(op.kind, OpKind::kAttention) << op.start_ns;
      continue;
    }
    ++moe_ops;
    auto [it, fresh] = instances.try_emplace({op.layer, op.micro_batch, op.phase}, op.start_ns, op.end_ns);
    it->second.first = std::min(it->second.first, op.start_ns);
    it->second.second = std::max(it->second.second, op.end_ns);
  }
  EXPECT_EQ(moe_ops, 2 * n * 7);  // per layer pair: 3 forward, 3 backward, 1 W
  ASSERT_EQ(instances.size(), static_cast<std::size_t>(2 * n * 3));
  auto us = [](double v) { return static_cast<std::int64_t>(v * 1000); };
  for (int c = 0; c < 2; ++c)
    for (int p = 0; p < n; ++p) {
      SCOPED_TRACE(fmt::format("chunk pair {}, layer pair {}", c, p));
      const double o = offset(s, c, p);
      const auto f = instances.find({p, c, Phase::kForward});
      const auto b = instances.find({n - 1 - p, c, Phase::kBackward});
      const auto w = instances.find({n - 1 - p, c, Phase::kWeightGradient});
      ASSERT_TRUE(f != instances.end() && b != instances.end() && w != instances.end());
      EXPECT_EQ(f->second, std::pair(us(o + 10), us(o + 45)));
      EXPECT_EQ(b->second, std::pair(us(o), us(o + 45)));
      EXPECT_EQ(w->second, std::pair(us(o + 25), us(o + 35)));
      // The kinds of the backward: its first all-to-all is the combine's.
      const auto* first = op_on(t, 14, o);
      const auto* last = op_on(t, 14, o + 35);
      ASSERT_TRUE(first && last);
      EXPECT_EQ(first->kind, OpKind::kCombineAllToAll);
      EXPECT_EQ(first->layer, n - 1 - p);
      EXPECT_EQ(last->kind, OpKind::kDispatchAllToAll);
      EXPECT_EQ(op_on(t, 13, o + 10)->kind, OpKind::kDispatchAllToAll);
      EXPECT_EQ(op_on(t, 13, o + 35)->kind, OpKind::kCombineAllToAll);
    }
  const auto br = analyzer::compute_breakdown(t);
  ASSERT_EQ(br.layers.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(br.iterations.size(), 1u);
  const auto iteration = us(offset(s, 1, n - 1) + 65) - us(100);
  EXPECT_EQ(br.iterations[0].t.window_ns, iteration);
  for (const auto& l : br.layers) {
    SCOPED_TRACE(l.layer);
    EXPECT_EQ(l.mean_window_ns, l.layer == n - 1 - l.layer ? us(90) : us(160));
    EXPECT_EQ(l.forward.window_ns, us(70));
    EXPECT_LT(l.mean_window_ns, iteration / 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, DualPipeShaped, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape>& i) { return std::string(i.param.name); });

// DualPipe's warm-up and cool-down run a backward chunk with its W deferred
// (_backward_chunk(enable_zb=True)), then the W passes in a function of
// their own (_weight_chunk -> WeightGradStore.pop), first in, first out:
// the W of the backward's first layer (n-1) runs first. Three layers, one
// micro-batch, names of Figure 4 in lower case. By hand, backward layer
// 2-k at [100+50k, 140+50k] (combine, experts, dispatch), then W k at
// [300+20k, 315+20k]: W k is layer 2-k's, so each layer's W window is 15 us
// and none spans the others'.
TEST(DualPipeShapedDeferredW, WeightPassesFollowTheirBackwardFirstInFirstOut) {
  Kineto k;
  k.range("ProfilerStep#4", 0, 500, 1, "user_annotation");
  k.range("dualpipe/dualpipe.py(98): _backward_compute_chunk", 10, 150, 1, "python_function");
  for (int l = 0; l < 3; ++l) {
    const double h = 12 + 45.0 * l, o = 100 + 50.0 * l;
    k.range("combine (b)", h, 4, 1, "user_annotation");
    k.kernel(kA2a, 14, o, 10, h + 1);
    k.range("mlp (b)", h + 10, 4, 1, "user_annotation");
    k.kernel(kGemm, 8, o + 10, 15, h + 11);
    k.range("dispatch (b)", h + 20, 4, 1, "user_annotation");
    k.kernel(kA2a, 14, o + 30, 10, h + 21);
  }
  k.range("dualpipe/dualpipe.py(232): _weight_chunk", 200, 80, 1, "python_function");
  k.range("dualpipe/utils.py(31): pop", 201, 78, 1, "python_function");
  for (int j = 0; j < 3; ++j) {
    k.range("mlp (w)", 205 + 20.0 * j, 4, 1, "user_annotation");
    k.kernel(kGemm, 8, 300 + 20.0 * j, 15, 206 + 20.0 * j);
  }
  const auto t = import_and_load({k.write("deferred_w.json")}, temp_path("deferred_w.db"));
  ASSERT_TRUE(t.recognition.moe);
  for (int j = 0; j < 3; ++j) {
    const auto& w = op_of_kernel(t, kGemm, 300 + 20.0 * j);
    EXPECT_EQ(w.phase, Phase::kWeightGradient) << j;
    EXPECT_EQ(w.layer, 2 - j) << j;
    const auto& b = op_of_kernel(t, kGemm, 110 + 50.0 * j);
    EXPECT_EQ(b.phase, Phase::kBackward) << j;
    EXPECT_EQ(b.layer, 2 - j) << j;
  }
  const auto br = analyzer::compute_breakdown(t);
  ASSERT_EQ(br.layers.size(), 3u);
}

}  // namespace
}  // namespace moetrace::testing
