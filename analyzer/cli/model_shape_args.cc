// --model and --tokens (commands.h ModelShapeArgs): in the executable only,
// not in the CUDA backend's plugin, which has no recommenders.
#include <memory>

#include "commands.h"
#include "moetrace/analyzer/recommend.h"

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
      ->check(CLI::PositiveNumber);
}

void apply_model_shape_args(ModelShapeArgs& args, analyzer::RecommendOptions& options) {
  if (!args.model.empty()) args.spec = std::make_shared<const analyzer::ModelSpec>(analyzer::read_model_spec(args.model));
  options.model = args.spec.get();
  options.tokens_per_rank = args.tokens;
}

}  // namespace moetrace::cli
