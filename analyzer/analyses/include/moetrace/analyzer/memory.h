// Device memory over time, memory bubbles, and the mpipemoe memory model.
//
// Definitions:
// - Allocations: where a rank has raw alloc/free events (memory_events), an
//   allocation lives from its alloc to the free of the same address (or to
//   the end of the run); otherwise each `buffers` row lives from alloc_ns to
//   free_ns (NULL alloc_ns: from the start of the run, NULL free_ns: to its
//   end). Buffers that no raw event names still get their bubbles computed
//   from alloc_ns/free_ns on ranks with raw events, without being counted
//   twice in the timeline. Only device memory counts (device, managed and unknown kinds; host
//   memory such as offload targets does not).
// - Memory timeline: bytes allocated on a rank, a step function.
// - Memory bubble (mpipemoe Fig. 6): a span of time in which a buffer is
//   allocated but no op that uses it (op_buffers) is running. An op runs
//   during its GPU time (its attributed activities, else its range).
//   memory_bubble_bytes_ns = bytes x bubble time, summed; a buffer that no op
//   uses is a bubble for its whole life. Bubbles need allocations linked to
//   buffers (buffer ids) and op_buffers; without them only the timeline is
//   computed.
// - Peak: the largest allocated total of a rank, and at that moment the bytes
//   of each memory class of mpipemoe Sec. II-B (buffer tags mapped by
//   memory_class(); allocations without a buffer are "unattributed").
// - The mpipemoe model (Eq. 1-6, in elements, here times elem_bytes) per MoE
//   layer from the layers table (E, M = model_dim, H = hidden_dim) and
//   run_config (elem_bytes, partitions or pipeline_degree), next to the peak
//   bytes the trace shows for that layer's buffers of each class. B, the
//   tokens a device processes, is measured from expert_load where present
//   (routed tokens per iteration over the devices, top-k included), else
//   layers.tokens (per rank) x top_k.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/mpipemoe_memory.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// mpipemoe Sec. II-B: model states (parameters, gradients, optimizer states;
// Eq. 1), activations (kept for the backward pass; Eq. 2), temporary buffers
// (gradients of activations and workspaces, discarded once used; Eq. 3).
enum class MemoryClass : std::uint8_t { kModelStates, kActivations, kTemporaryBuffers, kUnattributed };
inline constexpr int kNumMemoryClasses = 4;
std::string_view memory_class_name(MemoryClass c);  // "model_states", "activations", ...

// params, grads, optimizer -> model states; T_I, T_DI, T_M, T_DO, T_O,
// activation, routing -> activations; dT_*, activation_grad, workspace ->
// temporary buffers; anything else (and no tag) -> unattributed.
MemoryClass memory_class(std::string_view tag);

struct MemoryPoint {
  std::int64_t ts_ns = 0;
  std::int64_t bytes = 0;  // value from ts_ns until the next point
  friend bool operator==(const MemoryPoint&, const MemoryPoint&) = default;
};

// One span in which a buffer was allocated and unused (mpipemoe Fig. 6).
struct MemoryBubble {
  RankId rank;
  BufferId buffer;
  std::string tag;
  std::int32_t layer = -1, chunk = -1;
  std::int64_t bytes = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  double bytes_ns() const { return static_cast<double>(bytes) * static_cast<double>(end_ns - start_ns); }
};

// One allocation of a buffer and how much of its life ops used it.
struct BufferUse {
  RankId rank;
  BufferId buffer;
  std::string tag;
  MemoryClass memory_class = MemoryClass::kUnattributed;
  std::int32_t layer = -1, chunk = -1;
  std::int64_t bytes = 0;
  std::int64_t alloc_ns = 0, free_ns = 0;
  int ops = 0;                 // ops that use it
  std::int64_t used_ns = 0;    // time in which one of them ran, within the allocation
  std::int64_t bubble_ns = 0;  // allocated time minus used time
  double memory_bubble_bytes_ns() const { return static_cast<double>(bytes) * static_cast<double>(bubble_ns); }
};

// Bubbles summed per buffer tag (over ranks and layers).
struct TagBubbles {
  std::string tag;
  MemoryClass memory_class = MemoryClass::kUnattributed;
  int buffers = 0;                    // allocations
  std::int64_t max_bytes = 0;         // largest single allocation
  double allocated_bytes_ns = 0;      // bytes x allocated time
  double memory_bubble_bytes_ns = 0;  // bytes x bubble time
  double bubble_fraction() const {
    return allocated_bytes_ns > 0 ? memory_bubble_bytes_ns / allocated_bytes_ns : 0.0;
  }
};

using MemoryClassBytes = std::array<std::int64_t, kNumMemoryClasses>;

struct RankMemory {
  std::int32_t rank = 0;
  bool from_events = false;          // raw alloc/free events; false: the buffers table
  std::vector<MemoryPoint> allocated;  // step function, one point per change
  std::vector<MemoryPoint> idle;       // bytes in a bubble (allocated, unused), step function
  std::int64_t peak_bytes = 0, peak_ns = 0;
  MemoryClassBytes peak_by_class{};    // composition of the peak
  double allocated_bytes_ns = 0;      // integral of the timeline
  double buffer_bytes_ns = 0;         // byte-time of the buffers analysed for bubbles
  double memory_bubble_bytes_ns = 0;
  std::int64_t unmatched_frees = 0;    // frees of addresses the trace never allocated
  // analyze_memory: this rank's bubbles per buffer tag (by tag name), and
  // per MoE layer its buffers' peak per class and bubbles (by layer); the
  // run's tags and layer models add them up over the ranks.
  std::vector<TagBubbles> tags;
  struct LayerBuffers {
    std::int32_t layer = 0;
    MemoryClassBytes peak_bytes{-1, -1, -1, -1};  // -1: no buffer of the class
    double memory_bubble_bytes_ns = 0;
  };
  std::vector<LayerBuffers> layers;
  double bubble_fraction() const { return buffer_bytes_ns > 0 ? memory_bubble_bytes_ns / buffer_bytes_ns : 0.0; }
};

// MpipemoeShape, MpipemoeMemory: mpipemoe_memory.h.

// mpipemoe Eq. 1-6 for one MoE layer of one device, in bytes, and what the
// trace shows for the layer.
struct LayerMemoryModel {
  std::int32_t layer = 0;
  std::int64_t experts = 0;          // E
  double experts_per_rank = 1;       // E / P (the paper: 1)
  std::int64_t model_dim = 0;        // M
  std::int64_t hidden_dim = 0;       // H
  std::int64_t tokens = 0;           // B: routed tokens per device, top-k included (Sec. IV-A: k multiplies B)
  int partitions = 1;                // n
  int elem_bytes = 2;
  std::int64_t model_states_bytes = 0;       // Eq. 1: 4 (E M + (E/P) 2 H M)
  std::int64_t activations_bytes = 0;        // Eq. 2: 4 B M + B H
  std::int64_t temporary_buffers_bytes = 0;  // Eq. 3: B M + B H
  std::int64_t pipelined_buffers_bytes = 0;  // Eq. 4: M_buf^pipe = M_act^pipe = 4 B M + B H
  std::int64_t reuse_saving_bytes = 0;       // Eq. 5: dM_act = dM_buf = B (2M (n-2)/n + H (n-1)/n); 0 for n < 2
  double saving_ratio = 0;                   // Eq. 6: (dM_act + dM_buf) / (M_ms + M_act^pipe + M_buf^pipe)
  std::int64_t layer_bytes_without_reuse = 0;  // Eq. 1 + 2 x Eq. 4 (strategy none)
  std::int64_t layer_bytes_with_reuse = 0;     // the same less 2 x Eq. 5 (S1-S4)
  // Measured: the largest total of this layer's buffers of each class alive
  // at once on one rank (max over ranks); -1 where the trace has none.
  MemoryClassBytes measured_peak_bytes{-1, -1, -1, -1};
  double memory_bubble_bytes_ns = 0;  // of this layer's buffers, all ranks
};

// The memory timeline and the peak: the one rule for memory in use that the
// report, the recommenders and the GUI's memory rows follow.
struct MemoryTimeline {
  bool has_allocations = false;   // any allocation at all
  std::vector<RankMemory> ranks;  // by rank (idle and the bubble fields: analyze_memory)
  std::int64_t peak_bytes = 0;    // max over ranks
  std::int32_t peak_rank = -1;
  double allocated_bytes_ns = 0;  // integral of the timelines, all ranks
  // The run's start (RunInfo::start_ns): the times above are the trace's
  // clock (a real trace's epoch nanoseconds); shown as time into the run.
  std::int64_t origin_ns = 0;
  // The peak a memory budget is compared with; -1 where nothing is allocated.
  std::int64_t measured_peak_bytes() const { return has_allocations ? peak_bytes : -1; }
};

struct MemoryAnalysis : MemoryTimeline {
  bool has_buffer_usage = false;  // bubbles computed (allocations linked to buffers, op_buffers)
  std::vector<TagBubbles> tags;   // by tag name
  std::vector<BufferUse> buffers; // by rank, then alloc time
  std::vector<MemoryBubble> bubbles;  // by rank, then start
  std::vector<LayerMemoryModel> layers;  // MoE layers with a shape in the layers table
  double memory_bubble_bytes_ns = 0;  // all ranks
  double buffer_bytes_ns = 0;         // byte-time of the buffers analysed for bubbles
  // Per layer the most chunks any rank's ops of it carry (pipeline_degree's
  // count where the run configures none), by layer.
  std::vector<std::pair<std::int32_t, std::int32_t>> layer_chunks;
  // Share of the buffers' byte-time spent in bubbles.
  double bubble_fraction() const { return buffer_bytes_ns > 0 ? memory_bubble_bytes_ns / buffer_bytes_ns : 0.0; }
};

// The timeline alone (no bubbles, no model): cheaper than analyze_memory.
MemoryTimeline memory_timeline(const Trace& trace);
MemoryAnalysis analyze_memory(const Trace& trace);
// The analyses of traces of disjoint ranks (files of one run, each analysed
// alone) as analyze_memory() of their union. `run` holds the union's run
// information, layers table and expert load (the layer models read them).
// Consumes `parts`.
MemoryAnalysis merge_memory(std::vector<MemoryAnalysis> parts, const Trace& run);

// Windowed queries of a rank's timeline (RankMemory::allocated or idle).
// The value in force at t (0 before the first point).
std::int64_t memory_at(std::span<const MemoryPoint> timeline, std::int64_t t_ns);
// The timeline over [t0, t1): a first point at t0 with the value in force,
// then every change inside the window; the peak is the largest value in it
// (first reached at peak_ns).
struct MemoryWindow {
  std::vector<MemoryPoint> points;
  std::int64_t peak_bytes = 0, peak_ns = 0;
};
MemoryWindow memory_in_window(std::span<const MemoryPoint> timeline, std::int64_t t0_ns, std::int64_t t1_ns);

// The n allocations with the largest memory_bubble_bytes_ns (ties: by rank,
// buffer id, allocation time).
std::vector<const BufferUse*> largest_bubbles(const MemoryAnalysis& m, std::size_t n);

// Pipeline degree of a layer (pipemoe r, mpipemoe n): run_config
// "partitions" or "pipeline_degree" (whichever the run has, >= 1), else the
// number of chunks its ops carry. The one accessor of r: the memory model,
// the recommenders and the report read it here.
int pipeline_degree(const Trace& trace, std::int32_t layer);

}  // namespace moetrace::analyzer
