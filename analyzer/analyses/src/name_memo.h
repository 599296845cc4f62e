// What a test of a name gives, worked out once per distinct name of a
// trace's string table: a trace holds millions of runtime calls under a few
// dozen names, and each test (runtime_call_base_name, then string compares)
// costs more than the lookup. Private to the analyses.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer::detail {

// `work(std::string_view name)` gives the value of a name; of(id) calls it
// the first time `id` is asked for.
template <class T, class Work>
class NameMemo {
 public:
  NameMemo(const Trace& t, Work work) : t_(t), work_(std::move(work)), values_(t.strings.size() + 1) {}

  const T& of(StringId name) {
    // Slot 0 for a name outside the table (str() reads it as "").
    const auto i = name.valid() && static_cast<std::size_t>(name.value) < t_.strings.size()
                       ? static_cast<std::size_t>(name.value) + 1
                       : 0;
    auto& value = values_[i];
    if (!value) value = work_(t_.str(name));
    return *value;
  }

 private:
  const Trace& t_;
  Work work_;
  std::vector<std::optional<T>> values_;
};

}  // namespace moetrace::analyzer::detail
