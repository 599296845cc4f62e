#include "moetrace/cuda/link_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "moetrace/schema/error.h"

namespace moetrace::cuda {

void LinkModel::validate() const {
  if (!(latency_us >= 0) || !std::isfinite(latency_us))
    throw ConfigError(fmt::format("link latency_us ({}) must be a non-negative number", latency_us));
  if (!(bandwidth_gb_s > 0) || !std::isfinite(bandwidth_gb_s))
    throw ConfigError(fmt::format("link bandwidth_gb_s ({}) must be positive", bandwidth_gb_s));
  if (sms < 1 || sms > 1024) throw ConfigError(fmt::format("link sms ({}) must be in [1, 1024]", sms));
  if (piece_bytes < 16 || piece_bytes % 16 != 0)
    throw ConfigError(fmt::format("link piece_bytes ({}) must be a positive multiple of 16", piece_bytes));
}

double LinkModel::transfer_ns(std::int64_t bytes) const {
  return latency_us * 1e3 + static_cast<double>(bytes) / bandwidth_gb_s;
}

LinkModel parse_link_model(std::string_view spec) {
  LinkModel m;
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw ConfigError(fmt::format("link model: '{}' is not key=value", item));
    const std::string_view key = item.substr(0, eq);
    const std::string value(item.substr(eq + 1));
    auto number = [&](double& out) {
      char* end = nullptr;
      out = std::strtod(value.c_str(), &end);
      if (value.empty() || end != value.c_str() + value.size())
        throw ConfigError(fmt::format("link {} ({}) is not a number", key, value));
    };
    auto integer = [&](auto& out) {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
      if (value.empty() || ec != std::errc() || p != value.data() + value.size())
        throw ConfigError(fmt::format("link {} ({}) is not an integer", key, value));
    };
    if (key == "latency_us") number(m.latency_us);
    else if (key == "bandwidth_gb_s") number(m.bandwidth_gb_s);
    else if (key == "sms") integer(m.sms);
    else if (key == "piece_bytes") integer(m.piece_bytes);
    else
      throw ConfigError(fmt::format(
          "link model: unknown key '{}' (known: latency_us, bandwidth_gb_s, sms, piece_bytes)", key));
  }
  m.validate();
  return m;
}

std::string to_string(const LinkModel& m) {
  return fmt::format("latency_us={:g},bandwidth_gb_s={:g},sms={},piece_bytes={}", m.latency_us,
                     m.bandwidth_gb_s, m.sms, m.piece_bytes);
}

PaceParams pace_params(const LinkModel& m, std::int64_t paced_bytes) {
  PaceParams p;
  p.latency_ns = static_cast<std::int64_t>(std::llround(m.latency_us * 1e3));
  p.piece_bytes = m.piece_bytes;
  const std::int64_t pieces = std::max<std::int64_t>(1, (paced_bytes + m.piece_bytes - 1) / m.piece_bytes);
  p.blocks = static_cast<int>(std::min<std::int64_t>(m.sms, pieces));
  p.ns_per_byte_per_block = static_cast<double>(p.blocks) / m.bandwidth_gb_s;
  return p;
}

std::int64_t paced_finish_ns(const PaceParams& p, std::int64_t paced_bytes) {
  std::int64_t finish = p.latency_ns;
  for (int b = 0; b < p.blocks; ++b)
    finish = std::max(finish, pace_deadline_ns(p, block_share(paced_bytes, p.piece_bytes, p.blocks, b)));
  return finish;
}

std::int64_t all_reduce_phase_bytes(std::int64_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  return bytes * (ranks - 1) / ranks;
}

PaceParams reduce_pace_params(const LinkModel& m, std::int64_t slice_bytes) { return pace_params(m, slice_bytes); }

std::int64_t paced_reduce_finish_ns(const PaceParams& p, std::int64_t slice_bytes, int remote) {
  std::int64_t finish = p.latency_ns;
  for (int b = 0; b < p.blocks; ++b)
    finish = std::max(finish, pace_deadline_ns(p, block_share(slice_bytes, p.piece_bytes, p.blocks, b) * remote));
  return finish;
}

std::vector<BarrierStep> barrier_steps(int streams) {
  std::vector<BarrierStep> steps;
  if (streams < 2) return steps;
  using K = BarrierStep::Kind;
  for (int i = 1; i < streams; ++i) steps.push_back({K::kRecord, i, i});
  for (int i = 1; i < streams; ++i) steps.push_back({K::kWait, 0, i});
  steps.push_back({K::kRecord, 0, streams});
  for (int i = 1; i < streams; ++i) steps.push_back({K::kWait, i, streams});
  return steps;
}

}  // namespace moetrace::cuda
