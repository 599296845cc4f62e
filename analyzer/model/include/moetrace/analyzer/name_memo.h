// What a test of a name gives, worked out once per distinct name of a
// trace's string table: a trace holds millions of runtime calls, ranges and
// kernels under a few thousand names at most, and a test (a base name, then
// string compares or a search) costs more than the lookup.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// `work(std::string_view name)` gives the value of a name; of(id) calls it
// the first time `id` is asked for. NameMemo memo(trace, test) deduces the
// value's type from the test.
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

template <class Work>
NameMemo(const Trace&, Work) -> NameMemo<std::invoke_result_t<Work&, std::string_view>, Work>;

}  // namespace moetrace::analyzer
