#include "moetrace/analyzer/model_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"
#include "moetrace/analyzer/dtype.h"

namespace moetrace::analyzer {

namespace {

using nlohmann::json;

// The field names of each quantity in the configuration classes of
// Hugging Face transformers, most specific first (an MoE-specific name
// before a generic one that means the dense FFN in some families):
//   MixtralConfig: hidden_size, intermediate_size (per expert), num_local_experts, num_experts_per_tok
//   Qwen2MoeConfig: moe_intermediate_size, num_experts, shared_expert_intermediate_size,
//                   decoder_sparse_step, mlp_only_layers (Qwen3MoeConfig: no shared expert)
//   DeepseekV2Config / DeepseekV3Config: moe_intermediate_size, n_routed_experts, n_shared_experts,
//                   first_k_dense_replace, moe_layer_freq
//   OlmoeConfig: intermediate_size, num_experts
//   DbrxConfig: d_model, n_layers, ffn_config {ffn_hidden_size, moe_num_experts, moe_top_k}
//   GptOssConfig: intermediate_size, num_local_experts, num_experts_per_tok (experts_per_token in
//                   the original release's config)
//   Llama4TextConfig (text_config of Llama4Config): intermediate_size (per expert),
//                   num_local_experts, interleave_moe_layer_step
//   SwitchTransformersConfig: d_model, d_ff (per expert), num_experts, num_layers
const std::vector<std::string> kModelDim = {"hidden_size", "d_model", "n_embd"};
const std::vector<std::string> kExpertHidden = {"moe_intermediate_size", "ffn_config.ffn_hidden_size",
                                                "intermediate_size", "d_ff"};
const std::vector<std::string> kExperts = {"n_routed_experts", "num_local_experts", "num_experts",
                                           "moe_num_experts", "ffn_config.moe_num_experts"};
const std::vector<std::string> kTopK = {"num_experts_per_tok", "experts_per_token", "moe_top_k",
                                        "ffn_config.moe_top_k"};
const std::vector<std::string> kLayers = {"num_hidden_layers", "n_layers", "num_layers", "n_layer"};

const json* find_path(const json& j, const std::string& dotted) {
  const json* cur = &j;
  std::size_t from = 0;
  while (true) {
    const auto dot = dotted.find('.', from);
    const auto key = dotted.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    if (!cur->is_object()) return nullptr;
    const auto it = cur->find(key);
    if (it == cur->end() || it->is_null()) return nullptr;
    cur = &*it;
    if (dot == std::string::npos) return cur;
    from = dot + 1;
  }
}

class JsonReader {
 public:
  JsonReader(const json& root, std::string name) : root_(root), name_(std::move(name)) {
    // Multimodal configurations keep the language model's fields in
    // text_config (Llama 4, Qwen3-VL-MoE); the top level wins where both have one.
    if (const json* t = find_path(root_, "text_config"); t && t->is_object()) text_ = t;
  }

  template <class T>
  Sourced<T> integer(const std::vector<std::string>& keys, T min_value) const {
    for (const auto& k : keys)
      for (const auto& [where, prefix] : places())
        if (const json* v = find_path(*where, k)) return {number<T>(*v, prefix + k, min_value), source(prefix + k)};
    return {};
  }

  const json* field(const std::string& key, std::string* name) const {
    for (const auto& [where, prefix] : places())
      if (const json* v = find_path(*where, key)) {
        *name = prefix + key;
        return v;
      }
    return nullptr;
  }

  std::string source(const std::string& key) const { return fmt::format("{}: {}", name_, key); }

  template <class T>
  T number(const json& v, const std::string& key, T min_value) const {
    if (!v.is_number_integer())
      throw ConfigError(fmt::format("{}: {} is {}, not a whole number", name_, key, v.dump()));
    const auto x = v.get<std::int64_t>();
    if (x < static_cast<std::int64_t>(min_value) || x > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
      throw ConfigError(fmt::format("{}: {} = {} is out of range (at least {})", name_, key, x, min_value));
    return static_cast<T>(x);
  }

 private:
  std::vector<std::pair<const json*, std::string>> places() const {
    std::vector<std::pair<const json*, std::string>> p{{&root_, ""}};
    if (text_) p.push_back({text_, "text_config."});
    return p;
  }

  const json& root_;
  const json* text_ = nullptr;
  std::string name_;
};

// Whether the experts are gated. The experts of Mixtral (w1, w3, w2),
// Qwen2-MoE and Qwen3-MoE, DeepSeek-V2/V3 and OLMoE (gate_proj, up_proj,
// down_proj), DBRX (w1, v1, w2), GPT-OSS and Llama 4 (gate_up_proj,
// down_proj) are, in their Hugging Face implementations, as are those of
// the other MoE families it holds (Jamba, GraniteMoE, PhiMoE, GLM-4-MoE,
// ...); Switch Transformers' (unless feed_forward_proj is "gated-..."),
// NLLB-MoE's and GPTSAN's are two matrices around a ReLU or GELU.
Sourced<bool> gated_experts(const json& root, const std::string& model_type, const std::string& name) {
  if (const json* f = find_path(root, "feed_forward_proj"); f && f->is_string()) {
    const bool gated = f->get<std::string>().starts_with("gated");
    return {gated, fmt::format("{}: feed_forward_proj \"{}\"", name, f->get<std::string>())};
  }
  for (const char* plain : {"switch_transformers", "nllb_moe", "nllb-moe", "gptsan-japanese"})
    if (to_ascii_lower(model_type) == plain)
      return {false, fmt::format("{}: model_type {} (two-matrix experts)", name, model_type)};
  if (model_type.empty())
    return {true, fmt::format("{}: no model_type; the MoE families with these fields have gated experts", name)};
  return {true, fmt::format("{}: model_type {} (gated experts in its Hugging Face implementation)", name, model_type)};
}

ModelSpec parse_hf_config(const json& root, const std::string& name) {
  if (!root.is_object()) throw ConfigError(fmt::format("{}: not a JSON object (a config.json is one)", name));
  JsonReader r(root, name);
  ModelSpec m;
  std::string model_type = root.value("model_type", std::string());
  if (const json* t = find_path(root, "text_config.model_type"); t && t->is_string() && model_type.empty())
    model_type = t->get<std::string>();
  m.format = model_type.empty() ? std::string("Hugging Face config.json")
                                : fmt::format("Hugging Face config.json (model_type {})", model_type);
  m.experts = r.integer<int>(kExperts, 1);
  if (!m.experts)
    throw ConfigError(fmt::format(
        "{}: no routed-expert count (n_routed_experts, num_local_experts, num_experts, moe_num_experts, "
        "ffn_config.moe_num_experts): not the config.json of an MoE model",
        name));
  m.model_dim = r.integer<std::int64_t>(kModelDim, 1);
  m.expert_hidden = r.integer<std::int64_t>(kExpertHidden, 1);
  m.top_k = r.integer<int>(kTopK, 1);
  m.gated_experts = gated_experts(root, model_type, name);
  m.num_layers = r.integer<int>(kLayers, 1);
  m.first_dense_layers = r.integer<int>({"first_k_dense_replace"}, 0);
  // MoE every k-th layer. DeepSeek: layer l >= first_k_dense_replace with
  // l % moe_layer_freq == 0; Qwen-MoE (decoder_sparse_step) and Llama 4
  // (interleave_moe_layer_step): (l + 1) % step == 0.
  if (auto s = r.integer<int>({"moe_layer_freq"}, 1)) {
    m.moe_layer_step = s;
  } else if (auto q = r.integer<int>({"decoder_sparse_step", "interleave_moe_layer_step"}, 0); q && *q > 0) {
    m.moe_layer_step = q;
    m.step_counts_from_one = true;
  }
  std::string key;
  if (const json* d = r.field("mlp_only_layers", &key)) {
    if (!d->is_array()) throw ConfigError(fmt::format("{}: {} is not a list of layer numbers", name, key));
    for (const auto& l : *d) m.dense_layers.push_back(r.number<int>(l, key, 0));
  }
  // Shared experts: DeepSeek's n_shared_experts of moe_intermediate_size
  // each; Qwen2-MoE's one shared expert of shared_expert_intermediate_size.
  if (auto n = r.integer<int>({"n_shared_experts", "num_shared_experts"}, 0)) {
    m.shared_experts = n;
    if (*n > 0) {
      if (auto h = r.integer<std::int64_t>({"shared_expert_intermediate_size"}, 1)) m.shared_hidden = h;
      else if (m.expert_hidden) m.shared_hidden = m.expert_hidden;
    }
  } else if (auto h = r.integer<std::int64_t>({"shared_expert_intermediate_size"}, 0)) {
    m.shared_experts = {*h > 0 ? 1 : 0, h.source};
    if (*h > 0) m.shared_hidden = h;
  }
  for (const char* k : {"torch_dtype", "dtype"})
    if (const json* d = r.field(k, &key); d && d->is_string())
      if (auto b = dtype_bytes(d->get<std::string>())) {
        m.elem_bytes = {*b, r.source(key)};
        break;
      }
  return m;
}

// --- Megatron-Core arguments ---------------------------------------------------

// `--key value` and `--key=value` pairs and bare flags of a command line or
// launch script. Scripts keep arguments in variables (`ARGS="--a 1 --b 2"`,
// arrays over continued lines): words are split at white space whatever the
// quotes, quotes and line continuations dropped, comments skipped, and a
// word `NAME=--key...` read from its `--`.
std::map<std::string, std::string> megatron_arguments(std::string_view text) {
  std::vector<std::string> words;
  std::string w;
  bool comment = false;
  auto end_word = [&] {
    if (w.empty()) return;
    if (!w.starts_with("--"))
      if (const auto at = w.find("=--"); at != std::string::npos) w = w.substr(at + 1);
    words.push_back(std::move(w));
    w.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (comment) {
      if (c == '\n') comment = false;
      continue;
    }
    if (c == '\'' || c == '"' || c == '\\') continue;
    if (c == '#' && w.empty()) {
      comment = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      end_word();
    } else {
      w += c;
    }
  }
  end_word();
  std::map<std::string, std::string> args;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const auto& word = words[i];
    if (!word.starts_with("--")) continue;
    if (const auto eq = word.find('='); eq != std::string::npos) {
      args[word.substr(0, eq)] = word.substr(eq + 1);
    } else if (i + 1 < words.size() && !words[i + 1].starts_with("--")) {
      args[word] = words[++i];
    } else {
      args[word] = "";
    }
  }
  return args;
}

// "([0]*3+[1]*27)" or "[0,1,1]": Megatron-Core's --moe-layer-freq pattern
// (1 = MoE); nullopt where it is not of that form.
std::optional<std::vector<int>> layer_pattern(std::string_view s) {
  std::string t;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  if (t.size() >= 2 && t.front() == '(' && t.back() == ')') t = t.substr(1, t.size() - 2);
  std::vector<int> out;
  std::size_t i = 0;
  while (i < t.size()) {
    if (t[i] != '[') return std::nullopt;
    const auto close = t.find(']', i);
    if (close == std::string::npos) return std::nullopt;
    std::vector<int> items;
    std::stringstream in(t.substr(i + 1, close - i - 1));
    std::string item;
    while (std::getline(in, item, ',')) {
      if (item != "0" && item != "1") return std::nullopt;
      items.push_back(item == "1");
    }
    i = close + 1;
    int times = 1;
    if (i < t.size() && t[i] == '*') {
      std::size_t j = i + 1;
      while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
      if (j == i + 1 || std::from_chars(t.data() + i + 1, t.data() + j, times).ec != std::errc()) return std::nullopt;
      i = j;
    }
    for (int k = 0; k < times; ++k) out.insert(out.end(), items.begin(), items.end());
    if (i < t.size()) {
      if (t[i] != '+') return std::nullopt;
      ++i;
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

ModelSpec parse_megatron(std::string_view text, const std::string& name) {
  const auto args = megatron_arguments(text);
  ModelSpec m;
  m.format = "Megatron-Core arguments";
  auto src = [&](const std::string& k) { return fmt::format("{}: {}", name, k); };
  auto integer = [&](const std::string& k, std::int64_t min_value) -> std::optional<std::int64_t> {
    const auto it = args.find(k);
    if (it == args.end()) return std::nullopt;
    std::int64_t v = 0;
    const auto& s = it->second;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
      throw ConfigError(fmt::format("{}: {} {} is not a whole number{}", name, k, s.empty() ? "(no value)" : s,
                                    s.find('$') != std::string::npos ? " (expand the script's variables first)" : ""));
    if (v < min_value) throw ConfigError(fmt::format("{}: {} {} is out of range (at least {})", name, k, v, min_value));
    return v;
  };
  auto set_int = [&](Sourced<int>& f, const std::string& k, int min_value) {
    if (auto v = integer(k, min_value)) {
      if (*v > std::numeric_limits<int>::max()) throw ConfigError(fmt::format("{}: {} {} is too large", name, k, *v));
      f = {static_cast<int>(*v), src(k)};
    }
  };
  auto set_i64 = [&](Sourced<std::int64_t>& f, const std::string& k) {
    if (auto v = integer(k, 1)) f = {*v, src(k)};
  };
  set_int(m.experts, "--num-experts", 1);
  if (!m.experts)
    throw ConfigError(fmt::format("{}: no --num-experts among its arguments: not an MoE configuration", name));
  set_i64(m.model_dim, "--hidden-size");
  // Megatron-Core: --moe-ffn-hidden-size defaults to --ffn-hidden-size.
  set_i64(m.expert_hidden, "--moe-ffn-hidden-size");
  if (!m.expert_hidden) set_i64(m.expert_hidden, "--ffn-hidden-size");
  // Megatron-Core's MLP is gated with --swiglu (gated_linear_unit), else
  // two matrices around a GELU.
  if (args.count("--swiglu")) m.gated_experts = {true, src("--swiglu")};
  else m.gated_experts = {false, fmt::format("{}: no --swiglu (GELU experts, Megatron-Core's default)", name)};
  set_int(m.top_k, "--moe-router-topk", 1);
  if (!m.top_k) m.top_k = {2, fmt::format("{}: no --moe-router-topk, Megatron-Core's default 2", name)};
  set_int(m.num_layers, "--num-layers", 1);
  if (const auto it = args.find("--moe-layer-freq"); it != args.end()) {
    if (auto pattern = layer_pattern(it->second)) {
      for (std::size_t l = 0; l < pattern->size(); ++l)
        if (!(*pattern)[l]) m.dense_layers.push_back(static_cast<int>(l));
      m.moe_layer_step = {1, src("--moe-layer-freq")};
      if (!m.num_layers) m.num_layers = {static_cast<int>(pattern->size()), src("--moe-layer-freq")};
    } else {
      set_int(m.moe_layer_step, "--moe-layer-freq", 1);  // layer l is MoE where l % freq == 0
    }
  }
  if (auto h = integer("--moe-shared-expert-intermediate-size", 1)) {
    m.shared_experts = {1, src("--moe-shared-expert-intermediate-size")};
    m.shared_hidden = {*h, src("--moe-shared-expert-intermediate-size")};
  }
  set_int(m.expert_parallel, "--expert-model-parallel-size", 1);
  set_int(m.tensor_parallel, "--tensor-model-parallel-size", 1);
  set_int(m.pipeline_parallel, "--pipeline-model-parallel-size", 1);
  if (args.count("--bf16")) m.elem_bytes = {2, src("--bf16")};
  else if (args.count("--fp16")) m.elem_bytes = {2, src("--fp16")};
  else m.elem_bytes = {4, fmt::format("{}: neither --bf16 nor --fp16 (fp32)", name)};
  return m;
}

void validate(const ModelSpec& m, const std::string& name) {
  if (m.top_k && m.experts && *m.top_k > *m.experts)
    throw ConfigError(fmt::format("{}: {} experts per token ({}) but only {} routed experts ({})", name, *m.top_k,
                                  m.top_k.source, *m.experts, m.experts.source));
  if (m.num_layers && m.first_dense_layers && *m.first_dense_layers > *m.num_layers)
    throw ConfigError(fmt::format("{}: {} dense layers first ({}) but {} layers ({})", name, *m.first_dense_layers,
                                  m.first_dense_layers.source, *m.num_layers, m.num_layers.source));
}

}  // namespace

bool ModelSpec::is_moe_layer(int layer) const {
  if (layer < 0 || (num_layers && layer >= *num_layers)) return false;
  if (std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end()) return false;
  if (first_dense_layers && layer < *first_dense_layers) return false;
  const int step = moe_layer_step ? *moe_layer_step : 1;
  return step_counts_from_one ? (layer + 1) % step == 0 : layer % step == 0;
}

int ModelSpec::moe_layer_count() const {
  if (!num_layers) return -1;
  int n = 0;
  for (int l = 0; l < *num_layers; ++l) n += is_moe_layer(l);
  return n;
}

std::vector<std::string> ModelSpec::describe() const {
  std::vector<std::string> out;
  auto line = [&](const char* what, const auto& f) {
    if (f) out.push_back(fmt::format("{} = {} ({})", what, *f, f.source));
  };
  line("hidden size M", model_dim);
  line("expert FFN size H", expert_hidden);
  line("routed experts E", experts);
  line("experts per token k", top_k);
  if (gated_experts)
    out.push_back(fmt::format("experts {} ({})",
                              *gated_experts ? "gated (gate, up and down projections)" : "not gated (two matrices)",
                              gated_experts.source));
  line("shared experts", shared_experts);
  line("shared expert FFN size", shared_hidden);
  line("layers", num_layers);
  line("dense layers first", first_dense_layers);
  line("MoE every k-th layer, k", moe_layer_step);
  if (!dense_layers.empty()) out.push_back(fmt::format("dense layers listed: {}", fmt::join(dense_layers, ", ")));
  if (const int n = moe_layer_count(); n >= 0) out.push_back(fmt::format("MoE layers: {}", n));
  line("element bytes", elem_bytes);
  line("expert parallel EP", expert_parallel);
  line("tensor parallel TP", tensor_parallel);
  line("pipeline parallel PP", pipeline_parallel);
  return out;
}

ModelSpec parse_model_spec(std::string_view text, const std::string& name) {
  std::size_t first = 0;
  while (first < text.size() && std::isspace(static_cast<unsigned char>(text[first]))) ++first;
  ModelSpec m;
  if (first < text.size() && text[first] == '{') {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      throw ConfigError(fmt::format("{}: not valid JSON ({})", name, e.what()));
    }
    m = parse_hf_config(j, name);
  } else if (text.find("--") != std::string_view::npos) {
    m = parse_megatron(text, name);
  } else {
    throw ConfigError(fmt::format(
        "{}: neither a Hugging Face config.json (a JSON object) nor Megatron-Core arguments (--num-experts ...)",
        name));
  }
  m.path = name;
  validate(m, name);
  return m;
}

ModelSpec read_model_spec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the model file", path));
  std::stringstream s;
  s << in.rdbuf();
  return parse_model_spec(s.str(), path);
}

}  // namespace moetrace::analyzer
