// Unary saturation ramp: UnaryEcho offered at START, START+STEP, ... END calls/s (or at the rates
// listed in RATES), each step held for STEP_DURATION (ramping-arrival-rate with instant jumps
// between steps). Every sample is tagged with its step (stage=s01.., offered=<calls/s>), so
// deploy/report can find the knee.
//
// An open model: k6 starts each step's calls on schedule whatever the latency, one VU per call
// in flight, and an iteration that finds no free VU is dropped (k6's dropped_iterations), never
// delayed. Past capacity the calls in flight grow by (offered - capacity) x seconds in every
// step, so VUS must cover them: bench/study sizes it, docs/study-load.md has the arithmetic.
// All VUS are pre-allocated, and with PRECONNECT=1 (the default) a first scenario, `connect`,
// opens every VU's connection (k6's gRPC client is one connection per VU) before the ramp
// starts, so no handshake lands inside a measured step; a VU that still connects during the
// ramp is counted in late_connects. With WARMUP_RATE (calls/s; 0, the default, for none) the
// ramp's scenario first runs ceil(VUS / WARMUP_RATE) seconds of calls at that rate, one on each
// VU, that do no work on the server (stage `warmup`, tagged warmup=1, in no step), because a
// VU's first call in a scenario costs k6 twice a later one (common.js setWarmup): with
// thousands of VUs the first steps would measure k6 (bench/study sets 200). Their calls count
// in echod's totals, so a CPU per call from scrapes taken around the whole run is diluted by
// them: take the first scrape after the warm-up. MAX_VUS above VUS (default: 1000 or VUS) lets k6 initialise
// more VUs in the middle of a step, which costs the step its schedule: bench/study sets
// MAX_VUS = VUS. echo_answered counts each answer in the step it arrived in: a step's goodput
// (echo_sent, echo_ok and the latencies count a call in the step its iteration was due in by
// the schedule, common.js dueStage, not the one it started in: so per step the calls of all
// runners add up to offered x STEP_DURATION as long as k6 drops none; an idle second after the
// last step lets k6 start the schedule's last iteration, rampingStages).
//
//   k6 run -e TARGET=echod-cached:50051 -e ARM=cached --out csv=cached-ramp.csv \
//       deploy/k6/unary-ramp.js
//
// Env: TARGET, ARM, START (200), END (2400), STEP (200) or RATES (e.g. 200,400,800,900),
// STEP_DURATION (2m), VUS / MAX_VUS (50 / 1000, at least VUS), PRECONNECT (1), WARMUP_RATE (0), CONNECT_SECONDS (time given to
// the connect scenario: 1 s per 1,000 VUS, at least 5), SLICE_SECONDS (0: the latency of the
// calls sent in each interval of this length inside a step, `grpc_req_duration{stage:s08,slice:03}`
// in the summary), GRACEFUL_STOP (how long calls still in flight at the end may take: CALL_TIMEOUT
// + 5 s), and REFLECT, PROTO_DIR, CALL_TIMEOUT (10s), PAYLOAD, WORK_*, CONN_SHARING,
// SUMMARY_FILE, SUMMARY_STDOUT as in unary-fixed-rate.js. The summary's setup_data.ramp_start_ms
// is the wall-clock time the ramp's first step began (after the warm-up, setup_data.warmup).
//
// Needs k6 v0.53.0 or later (object spread; k6/timers from v0.50). An older k6 rejects the
// script before any line of it runs, so it cannot say so itself: deploy/README.md, "k6 versions".
import { Counter } from 'k6/metrics';
import * as c from './common.js';

const SCHEDULE = c.addSlices(c.scheduleFromEnv(200, 2400, 200, '2m'), c.parseDuration(c.env('SLICE_SECONDS', '0')));
const LATENCY = 'grpc_req_duration';
const VUS = c.envInt('VUS', 50);
const PRECONNECT = c.env('PRECONNECT', '1') !== '0';
const CONNECT_S = c.envInt('CONNECT_SECONDS', Math.max(5, Math.ceil(VUS / 1000)));
const GRACEFUL_STOP = c.env('GRACEFUL_STOP', `${Math.ceil(c.parseDuration(c.CALL_TIMEOUT)) + 5}s`);
const START_S = PRECONNECT ? CONNECT_S : 0;
const WARMUP = c.setWarmup(c.envInt('WARMUP_RATE', 0), VUS);

const scenarios = {
  unary_ramp: {
    executor: 'ramping-arrival-rate',
    startRate: WARMUP.n ? WARMUP.rate : SCHEDULE[0].offered,
    timeUnit: '1s',
    stages: c.rampingStages(SCHEDULE),
    preAllocatedVUs: VUS,
    maxVUs: c.envInt('MAX_VUS', Math.max(1000, VUS)),
    gracefulStop: GRACEFUL_STOP,
    startTime: `${START_S}s`,
    exec: 'unary',
  },
};
if (PRECONNECT) {
  // k6 hands these VUs, connected, to the ramp: scenarios that do not overlap in time share VUs
  scenarios.connect = {
    executor: 'per-vu-iterations',
    vus: VUS,
    iterations: 1,
    maxDuration: `${CONNECT_S}s`,
    gracefulStop: '0s',
    exec: 'preconnect',
  };
}

export const options = {
  scenarios,
  tags: { arm: c.ARM, script: 'unary-ramp' },
  summaryTrendStats: c.TREND_STATS,
  thresholds: c.stageThresholds(SCHEDULE, LATENCY, ['late_connects', 'echo_answered']),
};

const client = c.newClient();
const lateConnects = new Counter('late_connects');
let connected = false;

export function setup() {
  c.reflectOnce(client);
  // the scenarios start when setup returns; the ramp START_S later
  return { ramp_start_ms: Date.now() + (START_S + WARMUP.s) * 1000, vus: VUS, preconnect: PRECONNECT,
    warmup: { iterations: WARMUP.n, seconds: WARMUP.s, rate: WARMUP.rate } };
}

// Opens this VU's connection unless it has one; true when it had none.
function connectOnce() {
  if (connected) return false;
  c.connect(client);
  connected = true;
  return true;
}

export function preconnect() {
  connectOnce();
}

export function unary() {
  if (c.inWarmup()) {
    connectOnce();
    c.warmupCall(client);
    return;
  }
  const { stage, t } = c.dueNow(SCHEDULE);
  const tags = { slice: c.sliceAt(stage, t) };
  if (connectOnce()) lateConnects.add(1, c.stageTags(stage));
  c.unaryEcho(client, stage, stage.slices ? tags : undefined, SCHEDULE);
}

export const handleSummary = c.summaryHandler('unary-ramp', SCHEDULE, LATENCY);
