// mpipemoe's memory model (Eq. 1-6) of one MoE layer on one device: what the
// memory analysis (memory.h) sets beside a trace's buffers and what the
// memory-reuse recommender (memory_reuse.h) weighs.
#pragma once

namespace moetrace::analyzer {

// mpipemoe's memory model (Eq. 1-6) of one MoE layer on one device; the
// only place it is computed (the report, the memory-reuse recommender and
// the GUI read it from here).
struct MpipemoeShape {
  double tokens = 0;              // B: rows of T_DI, T_M, T_DO (the rows a device's experts compute), top-k included
  double own_tokens = -1;         // rows of T_I, T_O (the device's own routed rows); < 0: = tokens
  double model_dim = 0;           // M
  double hidden = 0;              // H
  double experts = 0;             // E (the gate's parameters, Eq. 1)
  double experts_per_device = 1;  // E / P (the paper: 1)
  int elem_bytes = 2;
  int partitions = 2;             // n
};
// In bytes (elements x elem_bytes).
struct MpipemoeMemory {
  double model_states = 0;       // Eq. 1: 4 (E M + (E/P) 2 H M)
  double activations = 0;        // Eq. 2 = Eq. 4's M_act^pipe: 4 B M + B H (2 B_own M + 2 B M + B H where the routing is uneven)
  double temporary_buffers = 0;  // Eq. 3: B M + B H
  double buffers = 0;            // Eq. 4: M_buf^pipe = M_act^pipe
  double saving = 0;             // Eq. 5: dM_act = dM_buf = B (2M (n-2)/n + H (n-1)/n); 0 for n < 2
  double saving_ratio = 0;       // Eq. 6: (dM_act + dM_buf) / (M_ms + M_act^pipe + M_buf^pipe)
  // The layer's memory in Eq. 6's accounting: M_ms + M_act^pipe + M_buf^pipe,
  // less dM_act + dM_buf with reuse (every strategy S1-S4 saves the same).
  double layer_bytes(bool reuse) const { return model_states + activations + buffers - (reuse ? 2 * saving : 0.0); }
};
MpipemoeMemory mpipemoe_memory(const MpipemoeShape& shape);

}  // namespace moetrace::analyzer
