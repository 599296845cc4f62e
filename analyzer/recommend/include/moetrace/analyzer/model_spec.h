// The shape of a user's MoE model, read from what users have: a Hugging
// Face `config.json` of an MoE model (Mixtral, Qwen-MoE, DeepSeek-V2/V3,
// OLMoE, DBRX, GPT-OSS, Llama 4 and the like) or a Megatron-Core argument
// list (`--num-experts 64 --moe-router-topk 8 ...`, as in a launch
// script). Every value carries where it came from, so that `recommend` can
// print what came from where and name both sources of a conflict.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::analyzer {

// A value and its origin ("config.json: moe_intermediate_size").
template <class T>
struct Sourced {
  std::optional<T> value;
  std::string source;
  explicit operator bool() const { return value.has_value(); }
  const T& operator*() const { return *value; }
};

struct ModelSpec {
  std::string path;    // the file read
  std::string format;  // "hugging face config.json (model_type X)" or "megatron-core arguments"
  Sourced<std::int64_t> model_dim;      // M: the hidden size
  Sourced<std::int64_t> expert_hidden;  // H: one routed expert's FFN size
  Sourced<int> experts;                 // routed experts E
  Sourced<int> top_k;                   // experts per token k
  // Gated experts (SwiGLU / GLU: three matrices, gate, up and down): every
  // MoE family Hugging Face transformers implements with these fields but
  // Switch Transformers and NLLB-MoE; Megatron-Core with --swiglu.
  Sourced<bool> gated_experts;
  Sourced<int> shared_experts;          // shared experts beside the routed ones
  Sourced<std::int64_t> shared_hidden;  // FFN size of one shared expert
  Sourced<int> num_layers;              // decoder layers, dense ones included
  Sourced<int> first_dense_layers;      // layers before the first MoE layer
  Sourced<int> moe_layer_step;          // every k-th layer is MoE: l % k == 0 (DeepSeek, Megatron-Core)
  bool step_counts_from_one = false;    // ... or (l + 1) % k == 0 (Qwen-MoE, Llama 4)
  std::vector<int> dense_layers;        // listed dense layers (Qwen's mlp_only_layers)
  Sourced<int> elem_bytes;              // parameter/activation element size
  // Parallel sizes (Megatron-Core arguments name them; config.json does not).
  Sourced<int> expert_parallel, tensor_parallel, pipeline_parallel;

  // Decoder layer `layer` (0-based) is an MoE layer; false where unknown.
  bool is_moe_layer(int layer) const;
  // The MoE layers among num_layers; -1 where num_layers is unknown.
  int moe_layer_count() const;
  // One line per known field: "hidden size M = 4096 (config.json: hidden_size)".
  std::vector<std::string> describe() const;
};

// Reads a config.json or an argument list; a ConfigError names the file
// and what is wrong (not JSON and no arguments, no MoE fields, a value of
// the wrong type or out of range).
ModelSpec read_model_spec(const std::string& path);
// The same from text already read (`name` stands for the file in messages).
ModelSpec parse_model_spec(std::string_view text, const std::string& name);

}  // namespace moetrace::analyzer
