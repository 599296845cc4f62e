#include "moetrace/cupti/check.h"

#include <cupti.h>
#include <fmt/format.h>

#include <filesystem>

#include "moetrace/schema/error.h"

namespace moetrace::cupti::detail {

void throw_status(const char* expr, const char* file, int line, const char* name, const char* text) {
  throw Error(fmt::format("{}:{}: {} failed: {} ({})", std::filesystem::path(file).filename().string(),
                          line, expr, name != nullptr ? name : "?", text != nullptr ? text : "?"));
}

std::string cuda_error_text(cudaError_t e) {
  return fmt::format("{}: {}", cudaGetErrorName(e), cudaGetErrorString(e));
}

void check_cupti(CUptiResult r, const char* expr, const char* file, int line) {
  if (r == CUPTI_SUCCESS) return;
  const char* name = nullptr;
  const char* message = nullptr;
  if (cuptiGetResultString(r, &name) != CUPTI_SUCCESS) name = "CUPTI_ERROR";
  if (cuptiGetErrorMessage(r, &message) != CUPTI_SUCCESS) message = name;
  throw_status(expr, file, line, name, message);
}

}  // namespace moetrace::cupti::detail
