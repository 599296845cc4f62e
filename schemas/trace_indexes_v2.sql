-- Indexes of schema v2 (v1's, less op_buffers_by_buffer: op_buffers is now a
-- view). The writer creates them when it closes a trace (so that inserting
-- stays fast); a trace whose writer was killed lacks them and
-- is still a valid, readable trace. Each serves a named analysis done in SQL;
-- the analyzer itself loads whole tables and sorts in memory, so it needs none
-- (tables are kept narrow and indexes few: both cost writer throughput).
-- NVTX-to-GPU projection: activity -> launching API call by correlation id.
-- Partial: simulated activity has no correlation id, and any comparison on
-- correlation_id (a join included) lets SQLite use these.
CREATE INDEX IF NOT EXISTS kernels_by_correlation ON kernels(correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memcpy_by_correlation  ON memcpy(correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS memset_by_correlation  ON memset(correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS api_calls_by_correlation ON api_calls(correlation_id);
-- NVTX range enclosing an API call on the same thread.
CREATE INDEX IF NOT EXISTS nvtx_by_thread   ON nvtx_ranges(rank, thread_id, start_ns);
-- Breakdowns per rank x layer x iteration x phase.
CREATE INDEX IF NOT EXISTS op_ranges_by_moe_coords ON op_ranges(layer, iteration, phase, rank);
-- Buffers by tag (the memory timeline per rank is memory_events' own order).
CREATE INDEX IF NOT EXISTS buffers_by_rank_tag   ON buffers(rank, tag);
