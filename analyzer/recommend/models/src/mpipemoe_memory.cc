#include "moetrace/analyzer/mpipemoe_memory.h"

#include <algorithm>
#include <cmath>

namespace moetrace::analyzer {

MpipemoeMemory mpipemoe_memory(const MpipemoeShape& in) {
  MpipemoeMemory m;
  const double B = in.tokens, M = in.model_dim, H = in.hidden, e = in.elem_bytes;
  const double B_own = in.own_tokens >= 0 ? in.own_tokens : B;
  // Eq. 1 counts the gate (E x M) and one expert (2 H M) per device, four
  // copies each (Adam); with E/P experts per device the expert term scales.
  m.model_states = 4.0 * (in.experts * M + in.experts_per_device * 2.0 * H * M) * e;
  // Eq. 2 / 4: T_I, T_O of the device's own rows; T_DI, T_DO, T_M of its experts'.
  m.activations = (2.0 * B_own * M + 2.0 * B * M + B * H) * e;
  m.temporary_buffers = (B * M + B * H) * e;  // Eq. 3
  m.buffers = m.activations;                  // Eq. 4
  const double n = in.partitions;
  if (in.partitions >= 2) m.saving = B * (2.0 * M * (n - 2) / n + H * (n - 1) / n) * e;  // Eq. 5
  const double total = m.model_states + m.activations + m.buffers;
  m.saving_ratio = total > 0 ? 2 * m.saving / total : 0;  // Eq. 6
  return m;
}

}  // namespace moetrace::analyzer
