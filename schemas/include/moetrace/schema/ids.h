// Strong id types: a RankId cannot be passed where a StreamId is expected.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace moetrace {

template <class Tag, class Rep = std::int32_t>
struct StrongId {
  Rep value{-1};
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : value(v) {}
  constexpr bool valid() const { return value >= 0; }
  constexpr auto operator<=>(const StrongId&) const = default;
};

using RankId = StrongId<struct RankTag>;
using StreamId = StrongId<struct StreamTag>;
using DeviceId = StrongId<struct DeviceTag>;
using OpId = StrongId<struct OpTag, std::int64_t>;
using BufferId = StrongId<struct BufferTag, std::int64_t>;
using StringId = StrongId<struct StringTag, std::int32_t>;

}  // namespace moetrace

template <class Tag, class Rep>
struct std::hash<moetrace::StrongId<Tag, Rep>> {
  std::size_t operator()(const moetrace::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>{}(id.value);
  }
};
