// Fixed-rate grid point: UnaryEcho at a constant arrival rate (open model: k6 starts RATE
// iterations per second whatever the latency, and counts the ones it could not start as
// dropped_iterations).
//
//   k6 run -e TARGET=echod-direct:50051 -e ARM=direct -e RATE=200 -e DURATION=10m \
//       --out csv=direct-fixed.csv deploy/k6/unary-fixed-rate.js
//
// Env: TARGET (host:port, default localhost:50051), ARM (tag), RATE (calls/s, 200), DURATION
// (5m), VUS / MAX_VUS (pre-allocated / most VUs, 20 / 400), REFLECT (0: load PROTO_DIR/echo.proto,
// PROTO_DIR default ../../proto; 1: server reflection, taken once in setup, common.js reflectOnce),
// CALL_TIMEOUT (10s), PAYLOAD,
// WORK_CPU_US / WORK_SLEEP_US / WORK_SLEEP_DIST / WORK_SLEEP_STALL_FRACTION / WORK_SLEEP_STALL_US /
// WORK_RESPONSE_BYTES (echod synthetic work, common.js workMetadata), CONN_SHARING,
// SUMMARY_FILE (summary-ARM-unary-fixed-rate.json, "-" none), SUMMARY_STDOUT (1: JSON on stdout).
//
// Needs k6 v0.53.0 or later (object spread; k6/timers from v0.50). An older k6 rejects the
// script before any line of it runs, so it cannot say so itself: deploy/README.md, "k6 versions".
import * as c from './common.js';

const RATE = c.envInt('RATE', 200);
const DURATION = c.env('DURATION', '5m');
const SCHEDULE = [{ name: 'fixed', offered: RATE, start_s: 0, duration_s: c.parseDuration(DURATION) }];
const LATENCY = 'grpc_req_duration';

export const options = {
  scenarios: {
    unary_fixed_rate: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: DURATION,
      preAllocatedVUs: c.envInt('VUS', 20),
      maxVUs: c.envInt('MAX_VUS', 400),
      exec: 'unary',
    },
  },
  tags: { arm: c.ARM, script: 'unary-fixed-rate' },
  summaryTrendStats: c.TREND_STATS,
  thresholds: c.stageThresholds(SCHEDULE, LATENCY),
};

const client = c.newClient();
let connected = false;

export function setup() {
  c.reflectOnce(client);
}

export function unary() {
  if (!connected) {
    c.connect(client);
    connected = true;
  }
  c.unaryEcho(client, SCHEDULE[0]);
}

export const handleSummary = c.summaryHandler('unary-fixed-rate', SCHEDULE, LATENCY);
