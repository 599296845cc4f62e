-- moetrace trace schema, version 1: superseded by trace_schema_v2.sql, kept
-- as the definition of the version-1 traces that readers still accept (and
-- that the loader's compatibility test builds). Version 1 is version 2 with
-- the differences below undone: run trace_schema_v2.sql first, then this file.
-- PRAGMA user_version = 1; readers refuse anything else.

-- An op's dependencies and buffer accesses are tables of their own, not two
-- JSON columns of op_ranges with views of version 1's columns.
DROP VIEW op_deps;
DROP VIEW op_buffers;
ALTER TABLE op_ranges DROP COLUMN buffers;
ALTER TABLE op_ranges DROP COLUMN deps;

CREATE TABLE op_deps (
  op_id     INTEGER NOT NULL,
  dep_op_id INTEGER NOT NULL,
  PRIMARY KEY (op_id, dep_op_id)
) WITHOUT ROWID;

CREATE TABLE op_buffers (
  op_id     INTEGER NOT NULL,
  buffer_id INTEGER NOT NULL,
  access    INTEGER NOT NULL CHECK (access = 1 OR access = 2 OR access = 3),
  PRIMARY KEY (op_id, buffer_id)
) WITHOUT ROWID;

-- Memory events are a rowid table (an index on (rank, ts_ns) beside it),
-- not clustered by (rank, ts_ns).
DROP TABLE memory_events;
CREATE TABLE memory_events (
  id             INTEGER PRIMARY KEY,
  rank           INTEGER NOT NULL,
  ts_ns          INTEGER NOT NULL,
  kind           INTEGER NOT NULL CHECK (kind = 0 OR kind = 1),
  address        INTEGER NOT NULL,
  bytes          INTEGER NOT NULL,
  memory_kind    INTEGER NOT NULL,
  stream_id      INTEGER,
  correlation_id INTEGER,
  buffer_id      INTEGER
);

-- The side tables added within version 2 do not exist.
DROP TABLE autograd_ranges;
DROP TABLE input_shapes;
DROP TABLE collective_seq;
DROP TABLE op_recv_bytes;
