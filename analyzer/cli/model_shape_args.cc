// --model and --tokens (commands.h ModelShapeArgs): in the executable only,
// not in the CUDA backend's plugin, which has no recommenders.
#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

#include "commands.h"

namespace moetrace::cli {

void add_model_shape_options(CLI::App* cmd, ModelShapeArgs& args) {
  cmd->add_option("--model", args.model,
                  "The model's shapes where the trace lacks them: a Hugging Face config.json of an MoE model "
                  "(Mixtral, Qwen-MoE, DeepSeek-V2/V3, OLMoE, DBRX, GPT-OSS, ...) or a file of Megatron-Core "
                  "arguments (--num-experts, --moe-router-topk, --hidden-size, --moe-ffn-hidden-size, "
                  "--expert-model-parallel-size, ...); a shape the trace also gives must agree")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokens", args.tokens,
                  "Tokens a rank holds per MoE layer, where the trace has no expert load and no dispatch "
                  "all-to-all (routing is then assumed balanced)")
      ->check([](const std::string& text) -> std::string {
        // (CLI11's PositiveNumber says "not in range 0.000000 to 1.8e308")
        std::int64_t n = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (ec != std::errc() || end != text.data() + text.size() || n <= 0)
          return "a positive whole number of tokens a rank holds, not \"" + text + "\"";
        return {};
      });
}

void apply_model_shape_args(ModelShapeArgs& args, analyzer::RecommendOptions& options) {
  args.spec = apply_model_shape_arg(args.model, args.tokens, options);
}

}  // namespace moetrace::cli
