// MoE semantics for traces recorded by other tools.
//
// moetrace's own traces carry op ranges with MoE coordinates. A trace
// imported from Nsight Systems or the PyTorch profiler carries the same facts
// implicitly: annotation ranges (our convention, docs/annotations.md), module
// and function ranges of the framework (Megatron-Core, DeepSpeed, Tutel,
// torchtitan, ...), `ProfilerStep#N`, and kernel names (DeepEP, NCCL, grouped
// GEMMs). Recognition turns them into op ranges, so that every analysis, the
// reports and the GUI work on such a trace unchanged.
//
// Rules are data: the built-in presets (analyzer/data/moe_rules.json, kernel
// names in analyzer/data/kernel_classes.json) and a user's own file
// (`--moe-rules FILE`, schemas/moe_rules.schema.json), tried first.
//
// What recognition does, per rank:
// 1. Context ranges. Every host range (NVTX, PyTorch `user_annotation`,
//    `cpu_op`, `python_function`) that the convention or a range rule
//    recognises becomes a context: an op kind (dispatch, combine, expert FFN,
//    ...) or a structural role (MoE layer, iteration, micro-batch), with
//    whatever coordinates it names. A context covers the API calls made on
//    its own thread during its span; an iteration context (ProfilerStep#N,
//    `moetrace:iteration`) covers every thread of its process, since
//    PyTorch's backward runs on a thread of its own.
// 2. Each GPU activity (kernel, copy, memset) is placed by its launching API
//    call (correlation id): the contexts open at that moment give its
//    coordinates, the innermost first. Its kind: a kernel rule's op kind
//    where the kernel's name is specific (DeepEP dispatch, an NCCL
//    all-to-all, a grouped GEMM, a permute kernel), else the innermost op
//    context's kind, else "moe_other" inside an MoE layer, else a kind by
//    its kernel category (outside MoE layers). Each placed activity becomes
//    one op range with its own GPU interval.
// 3. What the ranges did not say is inferred, and marked as inferred:
//    - all-to-all direction inside an MoE layer (an NCCL all-to-all is the
//      layer's dispatch or its combine): by order, the first half of the
//      layer's all-to-all kernels on the rank dispatch, the second half
//      combine (backward: the other way round, as the backward of the
//      combine runs first);
//    - the layer where no range names it: the k-th MoE layer instance of a
//      (rank, iteration) in the forward pass is layer k; backward instances
//      count down from the last forward layer. Without layer ranges, an
//      instance starts at a dispatch that follows a combine (or at a gate);
//    - the iteration where no range names it: the k-th of a rank's step
//      ranges that carry no number (an engine's step); else, after an
//      optimizer's k-th step, k; else, in a forward-only trace, a new
//      iteration where a layer range's name recurs; else iteration 0 for
//      the whole trace;
//    - the phase where no range names it: forward.
//    Inferences that cannot be made consistently (an odd number of
//    all-to-all kernels in a layer, different layer counts per iteration)
//    are reported as ambiguous.
// Recognition runs only on traces without op ranges of their own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/op_kind.h"

namespace moetrace::analyzer {

// What a recognised range is.
// kIterationEnd: a range that closes an iteration (an optimizer's step):
// where no range marks iterations, the work after the k-th such range on a
// rank is iteration k.
enum class RangeRole : std::uint8_t { kOp, kLayer, kIteration, kMicroBatch, kPhase, kIterationEnd };

// The annotation convention (docs/annotations.md): "moetrace:<kind>[ key=value]..."
// in any domain, or "<kind>[ key=value]..." in the NVTX domain "moetrace".
struct Annotation {
  RangeRole role = RangeRole::kOp;
  std::optional<OpKind> kind;  // role kOp
  std::int32_t layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  std::optional<Phase> phase;
};

enum class AnnotationParse : std::uint8_t { kNotAnnotation, kMalformed, kOk };

// Parses one range name; `domain` is the NVTX domain ("" for none). On
// kMalformed, `why` says what is wrong.
AnnotationParse parse_annotation(std::string_view domain, std::string_view name, Annotation& out,
                                 std::string* why = nullptr);

// A coordinate a range rule sets: a fixed value, or a capture group of its
// name pattern (1-based); neither: not set.
struct RuleCoordinate {
  std::int32_t value = -1;
  int group = 0;
  bool set() const { return value >= 0 || group > 0; }
};

struct RangeRule {
  std::string preset;            // "user" for a user's file
  std::string label, source;     // what it recognises; where the name comes from
  std::string domain;            // NVTX domain the range must have; empty: any
  std::string pattern;           // ECMAScript regex searched in the range's name
  // The compiled pattern (ECMAScript, icase where ignore_case), built on
  // first use: std::regex takes tens of microseconds a pattern to build and
  // most rules never see a name that passes their domain, prefix and keyword
  // tests. Copies of a rule share it; set `pattern` and `ignore_case` before
  // the first call. Throws std::regex_error on an invalid pattern (a parsed
  // user file has compiled each of its patterns already).
  const std::regex& regex() const;
  // A literal every match must start with ("^nn\\.Module: " -> "nn.Module: "):
  // names without it skip the regex. Empty: none could be derived.
  std::string required_prefix;
  // Every match starts at the name's start (^ and no alternation outside
  // groups): the regex is tried there only (match_continuous), not at every
  // position of the name. False: tried everywhere, as an unparsed rule is.
  bool anchored = false;
  RangeRole role = RangeRole::kOp;
  std::optional<OpKind> kind;
  RuleCoordinate layer, iteration, micro_batch, chunk;
  std::optional<Phase> phase;
  int phase_group = 0;           // > 0: the phase is this capture group, a phase marker
  bool ignore_case = false;
  // Lower-case words of which one must occur in the name (any case) before
  // the regex is tried; empty: always tried.
  std::vector<std::string> keywords;
  bool process_scope = false;    // covers every thread of the rank (iterations, phases)

 private:
  struct Compiled {
    std::once_flag once;
    std::regex regex;
  };
  std::shared_ptr<Compiled> compiled_ = std::make_shared<Compiled>();
};

// A phase marker as schedules write it, in any case: F, fwd, forward; B, I
// (backward for inputs), bwd, dgrad, backward; W, wgrad, weight. nullopt for
// anything else.
std::optional<Phase> parse_phase_marker(std::string_view marker);

struct MoeRules {
  std::vector<RangeRule> ranges;       // tried in order; the first match wins
  std::vector<KernelRule> kernels;     // user kernel rules (tried before kernel_rules())
  std::vector<std::string> origins;    // files the rules came from
};

// The built-in presets of analyzer/data/moe_rules.json. Parsed once a
// process without the schema validation and the pattern compilation of
// parse_moe_rules (each pattern compiles on first use); the tests run both on
// builtin_moe_rules_json().
const MoeRules& builtin_moe_rules();
inline constexpr const char* kBuiltinMoeRulesSource = "analyzer/data/moe_rules.json";
std::string_view builtin_moe_rules_json();

// Parses a rules document: validated against schemas/moe_rules.schema.json,
// then each pattern compiled; throws moetrace::Error("<source>: <rule>: ...")
// naming the rule (index and label) on a bad one.
MoeRules parse_moe_rules(std::string_view json, const std::string& source);

// Reads a user's rules file and puts its rules before the built-in ones.
MoeRules load_moe_rules(const std::string& path);

// The combined rules of a run: a user's file (if any) before the presets.
MoeRules combine_moe_rules(const MoeRules* user);


// Kernels no rule classifies (no kernel rule, and no recognised range gave
// them a specific kind), largest GPU time first: what to write a rule for.
struct UnclassifiedKernel {
  std::string name;
  std::int64_t count = 0, gpu_ns = 0;
};
std::vector<UnclassifiedKernel> largest_unclassified_kernels(const Trace& trace, std::size_t n);
// The n with the most GPU time (ties: by name), largest first.
std::vector<UnclassifiedKernel> largest_first(std::vector<UnclassifiedKernel> kernels, std::size_t n);

// For a trace recognition ran on: one line per part of the report that is
// missing, naming the annotation or rule that would unlock it.
std::vector<std::string> recognition_unlocks(const Trace& trace);

// The entry of RecognitionStats::rules_used that says iterations came from
// the periodicity of the layer ranges (no step ranges, forward only).
inline constexpr const char* kIterationsByPeriod =
    "periodicity: an iteration starts where a layer range's name recurs (forward only, no step ranges)";

// Materialises op ranges from the rules (see above) in a trace that has none;
// leaves a trace with op ranges of its own untouched (stats.ran = false).
// Also fills expert_load from all-to-all split sizes (Trace::collectives)
// where the recognised dispatches carry them.
RecognitionStats recognize_moe(Trace& trace, const MoeRules& rules);

}  // namespace moetrace::analyzer
