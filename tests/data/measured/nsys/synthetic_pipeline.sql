-- SYNTHETIC: not a real profile. A hand-written miniature of an `nsys export --type sqlite`
-- file (same table and column names as Nsight Systems' schema, a subset of the columns) for a
-- two-stage pipeline: rank 0 (process 100, GPU 0) runs a step with forward 0F0 and backward
-- 0B0 annotated as NVTX ranges, rank 1 (process 200, GPU 1) has an action range that launched
-- nothing. tests/measured_readers.rs builds it with rusqlite; `sqlite3 x.sqlite < this` works too.
-- globalTid = (pid << 24) | tid; globalPid = pid << 24 (Nsight's serialized global ids).
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO StringIds VALUES
  (1, 'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1'),
  (2, 'sm90_xmma_gemm'),
  (3, 'void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>(Flash_fwd_params)'),
  (4, 'kernel'),
  (5, 'ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)'),
  (6, 'ncclDevKernel_SendRecv'),
  (7, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)'),
  (8, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'),
  (9, 'void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>'),
  (10, 'vectorized_elementwise_kernel'),
  (11, '0B0'),
  (12, 'cudaLaunchKernel');
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
  (3000, 3500, 0, 1, 7, 1, 1677721600, 1, 2),
  (3500, 3900, 0, 1, 7, 2, 1677721600, 3, 4),
  (3900, 4200, 0, 1, 20, 3, 1677721600, 5, 6),
  (4300, 5000, 0, 1, 7, 4, 1677721600, 1, 2),
  (5000, 6000, 0, 1, 21, 5, 1677721600, 7, 8),
  (12000, 12500, 0, 1, 7, 6, 1677721600, 9, 10),
  (4000, 4100, 1, 1, 7, 1, 3355443200, 9, 10);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (2900, 3000, 0, 1, 7, 7, 1677721600, 4096, 1);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
  start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
  returnValue INTEGER NOT NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES
  (1050, 1060, 1, 1677721700, 7, 12, 0),
  (1200, 1210, 1, 1677721700, 1, 12, 0),
  (1201, 1209, 1, 1677721700, 1, 12, 0),
  (1300, 1310, 1, 1677721700, 2, 12, 0),
  (1400, 1410, 1, 1677721700, 3, 12, 0),
  (2100, 2110, 1, 1677721700, 4, 12, 0),
  (2600, 2610, 1, 1677721700, 5, 12, 0),
  (10100, 10110, 1, 1677721700, 6, 12, 0),
  (5000, 5010, 1, 3355443300, 1, 12, 0);
CREATE TABLE NVTX_EVENTS (
  start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
  textId INTEGER, domainId INTEGER);
INSERT INTO NVTX_EVENTS VALUES
  (900, NULL, 34, NULL, NULL, NULL, 'PP:0F9', 1677721700, NULL, NULL, 0),
  (1000, 10000, 59, NULL, NULL, NULL, 'ProfilerStep#5', 1677721700, NULL, NULL, 0),
  (1100, 1500, 59, NULL, NULL, NULL, 'PP:0F0', 1677721700, NULL, NULL, 0),
  (1150, 1450, 59, NULL, NULL, NULL, 'forward-backward', 1677721700, NULL, NULL, 0),
  (2000, 2500, 59, NULL, NULL, NULL, NULL, 1677721700, NULL, 11, 0),
  (10000, 20000, 59, NULL, NULL, NULL, 'ProfilerStep#6', 1677721700, NULL, NULL, 0),
  (1200, 1300, 59, NULL, NULL, NULL, 'PP:1F0', 3355443300, NULL, NULL, 0);
