-- A hand-made Nsight Systems SQLite export (the tables and columns the
-- importer reads, schema 3.24.14): the importer tests' fixture and, with
-- nccl_payloads.sql, a seed of the nsys_importer fuzzer (tools/fuzz.sh).
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.24.14');
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
INSERT INTO StringIds VALUES (1, 'ncclDevKernel_AllToAll_RING_LL(ncclDevComm*, unsigned long, ncclWork*)'),
                             (2, 'cudaLaunchKernel_v7000'), (3, 'gemm'), (4, 'my range'), (5, 'NCCL'),
                             (6, '_Z5saxpyPdS_S_di');
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, deviceId INTEGER, streamId INTEGER,
  correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER,
  blockX INTEGER, blockY INTEGER, blockZ INTEGER);
-- pid 42 = globalPid 42 << 24
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (100, 200, 0, 13, 1, 704643072, 1, 8, 1, 1, 512, 1, 1),
  (100, 150, 0, 7, 2, 704643072, 3, 1, 1, 1, 32, 1, 1),
  (300, 300, 0, 7, 3, 704643072, 6, NULL, NULL, NULL, NULL, NULL, NULL),
  (500, 400, 0, 7, 4, 704643072, 3, 1, 1, 1, 32, 1, 1);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, eventClass INTEGER, globalTid INTEGER,
  correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (90, 95, 0, 704643115, 1, 2, 0), (91, 96, 0, 704643115, 2, 2, 0),
  (92, 97, 99, 704643115, 3, 2, 0);
CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, text TEXT,
  textId INTEGER, domainId INTEGER, int64Value INTEGER, doubleValue REAL, color INTEGER);
INSERT INTO NVTX_EVENTS VALUES
  (0, NULL, 75, 704643115, NULL, 5, 3, NULL, NULL, NULL),
  (10, 500, 59, 704643115, NULL, 4, 3, 4096, NULL, 4278190335),
  (20, NULL, 60, 704643115, 'open range', NULL, 0, NULL, 2.5, NULL),
  (30, NULL, 34, 704643115, 'a mark', NULL, 0, NULL, NULL, NULL),
  (40, NULL, 99, 704643115, 'future', NULL, 0, NULL, NULL, NULL);
CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER, globalPid INTEGER, deviceId INTEGER, address INTEGER,
  bytes INTEGER, memKind INTEGER, memoryOperationType INTEGER, correlationId INTEGER);
INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (50, 704643072, 0, 4096, 1024, 2, 0, NULL),
  (450, 704643072, 0, 4096, 1024, 2, 1, NULL);
