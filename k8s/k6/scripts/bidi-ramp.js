// Streaming ramp: STREAMS persistent BidirectionalStreamingEcho streams (one per VU, each on its
// own connection), whose aggregate message rate steps from START to END msg/s by STEP, each step
// held for STEP_DURATION.
//
// Absolute scheduling: message k of a stream is due at a time computed from the schedule and the
// scenario's start, not from the previous send, so a stalled VU catches up instead of quietly
// offering less (coordinated omission). Each stream is phase-shifted by index/STREAMS of a gap so
// the streams do not all send in the same millisecond. Bounded in-flight: a stream with
// MAX_INFLIGHT messages unanswered skips the messages that fall due (counted in echo_dropped
// with their stage) instead of queueing without bound. echo_ok counts an answer in the stage its
// message was due in; echo_answered counts it in the stage it arrived in, which is the step's
// goodput: in a saturated step up to STREAMS x MAX_INFLIGHT answers come after the step ends. Latency is taken from the due time
// (bidi_msg_latency_ms, what deploy/report uses) and from the write (bidi_msg_rtt_ms); k6 gives
// scripts only millisecond clocks, so both have 1 ms resolution.
//
// A second scenario, `probe`, sends PROBE_RATE UnaryEcho calls per second (0: off) beside the
// streams and records their echod-timing trailer: k6 does not show a stream's trailers to a
// script, and the probe is what says how long the server queues work while the streams run.
//
//   k6 run -e TARGET=echod-per-method:50051 -e ARM=per-method -e STREAMS=40 \
//       --out csv=per-method-bidi.csv deploy/k6/bidi-ramp.js
//
// Env: TARGET, ARM, STREAMS (20), START (2000), END (16000), STEP (2000), STEP_DURATION (2m),
// MAX_INFLIGHT (100 per stream), TICK_MS (5), PROBE_RATE (10), and REFLECT, PROTO_DIR, PAYLOAD,
// WORK_*, CALL_TIMEOUT (probe), SUMMARY_FILE, SUMMARY_STDOUT as in unary-fixed-rate.js.
//
// Needs k6 v0.53.0 or later (object spread; k6/timers from v0.50). An older k6 rejects the
// script before any line of it runs, so it cannot say so itself: deploy/README.md, "k6 versions".
import grpc from 'k6/net/grpc';
import { check } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { setInterval, clearInterval } from 'k6/timers'; // k6 >= 0.50 (also global there)
import * as c from './common.js';

const STREAMS = Math.max(1, c.envInt('STREAMS', 20));
const SCHEDULE = c.stepSchedule(c.envInt('START', 2000), c.envInt('END', 16000), c.envInt('STEP', 2000),
  c.parseDuration(c.env('STEP_DURATION', '2m')));
const TOTAL_S = c.totalSeconds(SCHEDULE);
const MAX_INFLIGHT = Math.max(1, c.envInt('MAX_INFLIGHT', 100));
const TICK_MS = Math.max(1, c.envInt('TICK_MS', 5));
const PROBE_RATE = c.envInt('PROBE_RATE', 10);
const LATENCY = 'bidi_msg_latency_ms';

const scenarios = {
  streams: {
    executor: 'per-vu-iterations',
    vus: STREAMS,
    iterations: 1,
    maxDuration: `${Math.ceil(TOTAL_S) + 60}s`,
    gracefulStop: '30s',
    exec: 'bidi',
  },
};
if (PROBE_RATE > 0) {
  scenarios.probe = {
    executor: 'constant-arrival-rate',
    rate: PROBE_RATE,
    timeUnit: '1s',
    duration: `${Math.ceil(TOTAL_S)}s`,
    preAllocatedVUs: 2,
    maxVUs: 20,
    exec: 'probe',
  };
}

export const options = {
  scenarios,
  tags: { arm: c.ARM, script: 'bidi-ramp' },
  summaryTrendStats: c.TREND_STATS,
  thresholds: c.stageThresholds(SCHEDULE, LATENCY, ['bidi_msg_rtt_ms', 'echo_dropped', 'echo_answered', 'probe_ok']),
};

const msgLatency = new Trend('bidi_msg_latency_ms', true);
const msgRtt = new Trend('bidi_msg_rtt_ms', true);
const echoDropped = new Counter('echo_dropped');
const probeOk = new Counter('probe_ok');
const probeFailed = new Counter('probe_failed');

// Per-stream schedule: stage i sends offered_i / STREAMS msg/s. cum[i] = messages due before it.
const PER_STREAM = SCHEDULE.map((s) => s.offered / STREAMS);
const CUM = [];
SCHEDULE.reduce((acc, s, i) => {
  CUM.push(acc);
  return acc + PER_STREAM[i] * s.duration_s;
}, 0);
const TOTAL_MSGS = CUM[CUM.length - 1] + PER_STREAM[PER_STREAM.length - 1] * SCHEDULE[SCHEDULE.length - 1].duration_s;

// Seconds after the start at which the x-th message of a stream is due (x may be fractional).
function dueAt(x) {
  for (let i = SCHEDULE.length - 1; i >= 0; i--) {
    if (x >= CUM[i]) return SCHEDULE[i].start_s + (x - CUM[i]) / PER_STREAM[i];
  }
  return 0;
}

const client = c.newClient();
let connected = false;

export function setup() {
  c.reflectOnce(client);
}

function ensureConnected() {
  if (!connected) {
    c.connect(client);
    connected = true;
  }
}

export function bidi() {
  ensureConnected();
  const vu = exec.vu.idInTest;
  const phase = ((vu - 1) % STREAMS) / STREAMS;
  const origin = exec.scenario.startTime;
  const inflight = []; // { seq, due, sent, tags }, in send order (echod echoes in order)
  let next = 0;
  let sent = 0;
  let received = 0;
  let ended = false;
  let failed = false;

  const stream = new grpc.Stream(client, c.BIDI, { metadata: c.workMetadata('stream') });

  stream.on('data', (msg) => {
    const now = Date.now();
    const e = inflight.shift();
    const ok = check(msg, {
      'bidi echo in order': (m) => e !== undefined && m.message === `${c.PAYLOAD}-${vu}-${e.seq}`,
    }, e ? e.tags : {});
    if (!e) return;
    received++;
    if (ok) {
      c.echoOk.add(1, e.tags);
      // an answer after the schedule's end belongs to no step's goodput
      if (now - origin < TOTAL_S * 1000) c.echoAnswered.add(1, c.stageTags(c.stageAt(SCHEDULE, origin, now)));
      msgLatency.add(now - e.due, e.tags);
      msgRtt.add(now - e.sent, e.tags);
    } else {
      c.echoFailed.add(1, e.tags);
    }
  });

  stream.on('error', (err) => {
    failed = true;
    for (const e of inflight.splice(0)) c.echoFailed.add(1, e.tags);
    check(err, { 'bidi stream ended OK': () => false });
  });

  stream.on('end', () => {
    ended = true;
    clearInterval(timer);
    if (!failed) {
      check(null, {
        'bidi stream ended OK': () => true,
        'bidi every message echoed': () => received === sent,
      });
    }
  });

  const timer = setInterval(() => {
    if (ended) return;
    const nowMs = Date.now();
    const elapsed = (nowMs - origin) / 1000;
    while (next < TOTAL_MSGS - phase) {
      const dueS = dueAt(next + phase);
      if (dueS > elapsed) break;
      const stage = c.stageAt(SCHEDULE, 0, dueS * 1000);
      const tags = c.stageTags(stage);
      if (inflight.length >= MAX_INFLIGHT) {
        echoDropped.add(1, tags);
      } else {
        stream.write({ message: `${c.PAYLOAD}-${vu}-${next}` });
        inflight.push({ seq: next, due: origin + dueS * 1000, sent: nowMs, tags });
        c.echoSent.add(1, tags);
        sent++;
      }
      next++;
    }
    if (elapsed >= TOTAL_S || next >= TOTAL_MSGS - phase) {
      clearInterval(timer);
      stream.end();
    }
  }, TICK_MS);
}

export function probe() {
  ensureConnected();
  const stage = c.currentStage(SCHEDULE);
  const tags = { ...c.stageTags(stage), probe: '1' };
  const message = `probe-${exec.vu.idInTest}-${exec.vu.iterationInScenario}`;
  const res = client.invoke(c.UNARY, { message }, { metadata: c.workMetadata(stage.name), tags, timeout: c.CALL_TIMEOUT });
  const ok = check(res, {
    'probe UnaryEcho is OK': (r) => r.status === grpc.StatusOK && r.message.message === message,
  }, tags);
  if (ok) {
    probeOk.add(1, tags);
    c.recordTiming(res.trailers, tags);
  } else {
    probeFailed.add(1, tags);
  }
}

export const handleSummary = c.summaryHandler('bidi-ramp', SCHEDULE, LATENCY);
