#include "moetrace/cupti/op_message.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

namespace moetrace::cupti {

std::string format_op_message(const OpLabel& l) {
  return fmt::format(
      "{} {{op={} rank={} stream={} kind={} layer={} it={} mb={} chunk={} phase={} flops={:.17g} "
      "bytes={} recv_bytes={} peer={}}}",
      l.name, l.op.value, l.rank.value, l.stream.value, op_kind_name(l.kind), l.layer, l.iteration,
      l.micro_batch, l.chunk, phase_name(l.phase), l.flops, l.bytes, l.recv_bytes, l.peer.value);
}

std::optional<OpLabel> parse_op_message(std::string_view message) {
  const std::size_t open = message.rfind(" {");
  if (open == std::string_view::npos || message.empty() || message.back() != '}') return std::nullopt;
  OpLabel l;
  l.name = std::string(message.substr(0, open));
  std::string_view body = message.substr(open + 2, message.size() - open - 3);
  bool has_op = false;
  while (!body.empty()) {
    const std::size_t space = body.find(' ');
    const std::string_view item = body.substr(0, space);
    body = space == std::string_view::npos ? std::string_view() : body.substr(space + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    auto integer = [&](auto& out) {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
      return ec == std::errc() && p == value.data() + value.size();
    };
    bool ok = true;
    if (key == "op") {
      ok = integer(l.op.value);
      has_op = ok;
    } else if (key == "rank") {
      ok = integer(l.rank.value);
    } else if (key == "stream") {
      ok = integer(l.stream.value);
    } else if (key == "kind") {
      auto k = parse_op_kind(value);
      ok = k.has_value();
      if (ok) l.kind = *k;
    } else if (key == "layer") {
      ok = integer(l.layer);
    } else if (key == "it") {
      ok = integer(l.iteration);
    } else if (key == "mb") {
      ok = integer(l.micro_batch);
    } else if (key == "chunk") {
      ok = integer(l.chunk);
    } else if (key == "phase") {
      auto p = parse_phase(value);
      ok = p.has_value();
      if (ok) l.phase = *p;
    } else if (key == "flops") {
      const std::string v(value);
      char* end = nullptr;
      l.flops = std::strtod(v.c_str(), &end);
      ok = !v.empty() && end == v.c_str() + v.size();
    } else if (key == "bytes") {
      ok = integer(l.bytes);
    } else if (key == "recv_bytes") {
      ok = integer(l.recv_bytes);
    } else if (key == "peer") {
      ok = integer(l.peer.value);
    }  // unknown keys: ignored (newer writers may add some)
    if (!ok) return std::nullopt;
  }
  if (!has_op) return std::nullopt;
  return l;
}

}  // namespace moetrace::cupti
