// Unary saturation ramp: UnaryEcho offered at START, START+STEP, ... END calls/s, each step
// held for STEP_DURATION (ramping-arrival-rate with instant jumps between steps). Every sample
// is tagged with its step (stage=s01.., offered=<calls/s>), so deploy/report can find the knee.
//
//   k6 run -e TARGET=echod-cached:50051 -e ARM=cached --out csv=cached-ramp.csv \
//       deploy/k6/unary-ramp.js
//
// Env: TARGET, ARM, START (200), END (2400), STEP (200), STEP_DURATION (2m), VUS / MAX_VUS
// (50 / 1000), and REFLECT, PROTO_DIR, CALL_TIMEOUT, PAYLOAD, WORK_*, CONN_SHARING,
// SUMMARY_FILE, SUMMARY_STDOUT as in unary-fixed-rate.js.
//
// Needs k6 v0.53.0 or later (object spread; k6/timers from v0.50). An older k6 rejects the
// script before any line of it runs, so it cannot say so itself: deploy/README.md, "k6 versions".
import * as c from './common.js';

const SCHEDULE = c.stepSchedule(c.envInt('START', 200), c.envInt('END', 2400), c.envInt('STEP', 200),
  c.parseDuration(c.env('STEP_DURATION', '2m')));
const LATENCY = 'grpc_req_duration';

export const options = {
  scenarios: {
    unary_ramp: {
      executor: 'ramping-arrival-rate',
      startRate: SCHEDULE[0].offered,
      timeUnit: '1s',
      stages: c.rampingStages(SCHEDULE),
      preAllocatedVUs: c.envInt('VUS', 50),
      maxVUs: c.envInt('MAX_VUS', 1000),
      exec: 'unary',
    },
  },
  tags: { arm: c.ARM, script: 'unary-ramp' },
  summaryTrendStats: c.TREND_STATS,
  thresholds: c.stageThresholds(SCHEDULE, LATENCY),
};

const client = c.newClient();
let connected = false;

export function unary() {
  if (!connected) {
    c.connect(client);
    connected = true;
  }
  c.unaryEcho(client, c.currentStage(SCHEDULE));
}

export const handleSummary = c.summaryHandler('unary-ramp', SCHEDULE, LATENCY);
