-- moetrace trace schema, version 2 (version 1: trace_schema_v1.sql, still
-- read; the difference is that v2 packs op_deps and op_buffers into two JSON
-- columns of op_ranges and keeps them as views).
-- One database holds one run (all its ranks). Timestamps are integer
-- nanoseconds on one clock per run (CUPTI's for GPU runs, simulated time for
-- the simulator). Every table and column is documented in schemas/README.md.
-- The writer sets PRAGMA application_id = 1297040724 ('MOET') and
-- PRAGMA user_version = 2; readers refuse anything newer than they know.
--
-- CHECK constraints spell value lists as `x = a OR x = b`, not `x IN (a, b)`:
-- SQLite evaluates a CHECK's IN list of three or more values through an
-- ephemeral table built for every row, which made inserting op_buffers 2.5x
-- slower (see BENCHMARKS.md, simulator section). The accepted values are the
-- same.

CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE run (
  id               INTEGER PRIMARY KEY CHECK (id = 1),
  name             TEXT,
  backend          TEXT NOT NULL,
  variant          TEXT,
  simulated        INTEGER NOT NULL DEFAULT 0,
  world_size       INTEGER NOT NULL,
  host             TEXT,
  moetrace_version TEXT NOT NULL,
  created_unix_s   INTEGER NOT NULL,
  start_ns         INTEGER,
  end_ns           INTEGER,
  config_json      TEXT,
  dropped_records  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE run_config (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE strings (
  id    INTEGER PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE devices (
  id            INTEGER PRIMARY KEY,
  name          TEXT NOT NULL,
  uuid          TEXT,
  compute_major INTEGER,
  compute_minor INTEGER,
  sm_count      INTEGER,
  memory_bytes  INTEGER,
  simulated     INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE ranks (
  rank       INTEGER PRIMARY KEY,
  device_id  INTEGER NOT NULL REFERENCES devices(id),
  local_rank INTEGER,
  host       TEXT,
  pid        INTEGER
);

CREATE TABLE streams (
  id            INTEGER PRIMARY KEY,
  rank          INTEGER NOT NULL,
  device_id     INTEGER,
  native_id     INTEGER,
  role          TEXT NOT NULL CHECK (role = 'compute' OR role = 'comm' OR role = 'copy' OR role = 'other'),
  name          TEXT,
  priority      INTEGER
);

CREATE TABLE launch_configs (
  id           INTEGER PRIMARY KEY,
  grid_x       INTEGER NOT NULL,
  grid_y       INTEGER NOT NULL,
  grid_z       INTEGER NOT NULL,
  block_x      INTEGER NOT NULL,
  block_y      INTEGER NOT NULL,
  block_z      INTEGER NOT NULL,
  shared_bytes INTEGER,
  registers    INTEGER
);

CREATE TABLE kernels (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  stream_id      INTEGER NOT NULL,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER NOT NULL,
  name_id        INTEGER NOT NULL,
  correlation_id INTEGER,
  launch_id      INTEGER,
  op_id          INTEGER
);

CREATE TABLE memcpy (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  stream_id      INTEGER NOT NULL,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER NOT NULL,
  bytes          INTEGER NOT NULL,
  copy_kind      INTEGER NOT NULL,
  src_kind       INTEGER,
  dst_kind       INTEGER,
  correlation_id INTEGER,
  op_id          INTEGER
);

CREATE TABLE memset (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  stream_id      INTEGER NOT NULL,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER NOT NULL,
  bytes          INTEGER NOT NULL,
  value          INTEGER,
  correlation_id INTEGER,
  op_id          INTEGER
);

-- Clustered by (rank, ts_ns): a rank's memory timeline is one range of the
-- table, in time order, with no index to build beside it. `id` (unique,
-- in the order the writer received the events) breaks ties.
CREATE TABLE memory_events (
  id             INTEGER NOT NULL,
  rank           INTEGER NOT NULL,
  ts_ns          INTEGER NOT NULL,
  kind           INTEGER NOT NULL CHECK (kind = 0 OR kind = 1),
  address        INTEGER NOT NULL,
  bytes          INTEGER NOT NULL,
  memory_kind    INTEGER NOT NULL,
  stream_id      INTEGER,
  correlation_id INTEGER,
  buffer_id      INTEGER,
  PRIMARY KEY (rank, ts_ns, id)
) WITHOUT ROWID;

CREATE TABLE api_calls (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  thread_id      INTEGER NOT NULL,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER NOT NULL,
  api            INTEGER NOT NULL CHECK (api = 1 OR api = 2),
  name_id        INTEGER NOT NULL,
  correlation_id INTEGER NOT NULL,
  return_code    INTEGER
);

CREATE TABLE sync_events (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  stream_id      INTEGER,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER NOT NULL,
  kind           INTEGER NOT NULL,
  correlation_id INTEGER,
  -- An event wait: the stream that recorded the event waited for and the
  -- correlation id of that cudaEventRecord call (added within version 2).
  wait_stream_id              INTEGER,
  event_record_correlation_id INTEGER
);

CREATE TABLE overhead (
  id        INTEGER PRIMARY KEY,
  rank      INTEGER NOT NULL,
  thread_id INTEGER,
  start_ns  INTEGER NOT NULL,
  end_ns    INTEGER NOT NULL,
  kind      TEXT NOT NULL
);

CREATE TABLE nvtx_ranges (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  thread_id      INTEGER NOT NULL,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER,
  domain_id      INTEGER,
  name_id        INTEGER NOT NULL,
  category       INTEGER,
  color          INTEGER,
  payload_int    INTEGER,
  payload_double REAL
);

-- PyTorch's autograd sequence numbers of host ranges (a cpu_op's "Sequence
-- number" in a PyTorch-profiler trace): a forward op and the backward node
-- that computes its gradient share one, which ties the backward's kernels
-- to the module the forward ran in. Added within version 2: readers that
-- predate it ignore it, and readers of it must allow for its absence.
CREATE TABLE autograd_ranges (
  nvtx_id        INTEGER PRIMARY KEY,  -- nvtx_ranges.id
  sequence       INTEGER NOT NULL,
  backward       INTEGER NOT NULL      -- 1: a backward node, 0: a forward op
);

-- The input shapes and types of host ranges that are matrix products (aten::mm,
-- addmm, bmm, linear, _grouped_mm, ...) or top-k selections (aten::topk), as the
-- PyTorch profiler records them with record_shapes=True (a cpu_op's "Input
-- Dims" and "Input type"), as JSON text: the GEMMs' and the router's top-k's
-- shapes give an MoE layer's sizes. Added within version 2: readers that predate it ignore it,
-- and readers of it must allow for its absence.
CREATE TABLE input_shapes (
  nvtx_id        INTEGER PRIMARY KEY,  -- nvtx_ranges.id
  input_dims     TEXT NOT NULL,        -- e.g. [[8192,4096],[14336,4096]]
  input_types    TEXT                  -- e.g. ["c10::BFloat16","c10::BFloat16"]
);

-- NCCL collectives as the source tool described them (Kineto's kernel args):
-- one row per collective kernel, linked to it by (rank, correlation_id). Added
-- within version 1: readers that predate it ignore it, and readers of it must
-- allow for its absence in older traces.
CREATE TABLE collectives (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  stream_id      INTEGER,
  start_ns       INTEGER NOT NULL,
  end_ns         INTEGER NOT NULL,
  correlation_id INTEGER,
  name           TEXT NOT NULL,
  in_nelems      INTEGER,
  out_nelems     INTEGER,
  dtype          TEXT,
  group_size     INTEGER,
  group_ranks    TEXT,
  process_group  TEXT,
  in_splits      TEXT,
  out_splits     TEXT
);

-- The sequence number of a collective call in its process group (Kineto's
-- "Seq"), the same on every member rank for one call: multi-rank clock
-- alignment pairs calls by (process group, seq). Added within version 2:
-- readers that predate it ignore it, and readers of it must allow for its
-- absence.
CREATE TABLE collective_seq (
  collective_id  INTEGER PRIMARY KEY,  -- collectives.id
  seq            INTEGER NOT NULL
);

-- The bytes an all-to-all op's rank receives from the other ranks in the call
-- (its own segment not included; op_ranges.bytes is what it sends): the
-- busiest receiver can set an uneven all-to-all's time. Added within version
-- 2: readers that predate it ignore it, and readers of it must allow for its
-- absence.
CREATE TABLE op_recv_bytes (
  op_id          INTEGER PRIMARY KEY,  -- op_ranges.id
  bytes          INTEGER NOT NULL
);

CREATE TABLE op_kinds (
  id       INTEGER PRIMARY KEY,
  name     TEXT NOT NULL UNIQUE,
  category TEXT NOT NULL
);

CREATE TABLE layers (
  layer       INTEGER PRIMARY KEY,
  kind        TEXT NOT NULL,
  num_experts INTEGER,
  top_k       INTEGER,
  model_dim   INTEGER,
  hidden_dim  INTEGER,
  tokens      INTEGER
);

CREATE TABLE op_ranges (
  id              INTEGER PRIMARY KEY,
  rank            INTEGER NOT NULL,
  stream_id       INTEGER NOT NULL,
  kind            INTEGER NOT NULL REFERENCES op_kinds(id),
  name_id         INTEGER,
  layer           INTEGER,
  iteration       INTEGER,
  micro_batch     INTEGER,
  chunk           INTEGER,
  phase           INTEGER NOT NULL CHECK (phase = 0 OR phase = 1 OR phase = 2),
  start_ns        INTEGER NOT NULL,
  end_ns          INTEGER NOT NULL,
  launch_start_ns INTEGER,
  launch_end_ns   INTEGER,
  flops           REAL,
  bytes           INTEGER,
  peer_rank       INTEGER,
  nvtx_id         INTEGER,
  deps            TEXT,
  buffers         TEXT
  -- deps, buffers: JSON arrays (schemas/include/moetrace/schema/op_links.h):
  -- op ids this op waits for, ascending; [buffer id, access] pairs, ascending
  -- by buffer. NULL where there are none.
);

-- Plan dependencies, one row per (op, op it waits for): op_ranges.deps
-- expanded, so that SQL written for version 1's op_deps table still works.
CREATE VIEW op_deps (op_id, dep_op_id) AS
  SELECT o.id, j.value FROM op_ranges AS o, json_each(o.deps) AS j WHERE o.deps IS NOT NULL;

CREATE TABLE buffers (
  id          INTEGER PRIMARY KEY,
  rank        INTEGER NOT NULL,
  tag         TEXT NOT NULL,
  bytes       INTEGER NOT NULL,
  memory_kind INTEGER NOT NULL DEFAULT 1,
  layer       INTEGER,
  chunk       INTEGER,
  alloc_ns    INTEGER,
  free_ns     INTEGER,
  address     INTEGER
);

-- Which op reads/writes which buffer: op_ranges.buffers expanded (as
-- version 1's op_buffers table).
CREATE VIEW op_buffers (op_id, buffer_id, access) AS
  SELECT o.id, json_extract(j.value, '$[0]'), json_extract(j.value, '$[1]')
  FROM op_ranges AS o, json_each(o.buffers) AS j WHERE o.buffers IS NOT NULL;

CREATE TABLE expert_load (
  iteration INTEGER NOT NULL,
  layer     INTEGER NOT NULL,
  src_rank  INTEGER NOT NULL,
  expert    INTEGER NOT NULL,
  tokens    INTEGER NOT NULL,
  PRIMARY KEY (iteration, layer, src_rank, expert)
) WITHOUT ROWID;

CREATE TABLE expert_placement (
  iteration INTEGER NOT NULL,
  layer     INTEGER NOT NULL,
  expert    INTEGER NOT NULL,
  rank      INTEGER NOT NULL,
  role      TEXT NOT NULL CHECK (role = 'home' OR role = 'replica' OR role = 'shadow'),
  PRIMARY KEY (iteration, layer, expert, rank)
) WITHOUT ROWID;
