// REST control arm: the same stepped ramp as unary-ramp.js over HTTP/1.1, `POST /echo` against
// echod's REST listener (listen.rest, config/arms/rest.yaml), which does not go through the
// dispatch model. It shows what the host, the network and k6 itself cost at each step.
//
//   k6 run -e TARGET=echod-rest:8081 -e ARM=rest --out csv=rest-ramp.csv \
//       deploy/k6/rest-control.js
//
// Env: TARGET (host:port of the REST listener, default localhost:8081), ARM, START (200), END
// (2400), STEP (200) or RATES, STEP_DURATION (2m), VUS / MAX_VUS (50 / 1000), CALL_TIMEOUT
// (10s), PAYLOAD, WORK_* (sent as headers; the REST arm may ignore them), SUMMARY_FILE,
// SUMMARY_STDOUT.
//
// Needs k6 v0.53.0 or later (object spread; k6/timers from v0.50). An older k6 rejects the
// script before any line of it runs, so it cannot say so itself: deploy/README.md, "k6 versions".
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import * as c from './common.js';

const TARGET = c.env('TARGET', 'localhost:8081');
const URL = `http://${TARGET}/echo`;
const SCHEDULE = c.scheduleFromEnv(200, 2400, 200, '2m');
const LATENCY = 'http_req_duration';

export const options = {
  scenarios: {
    rest_ramp: {
      executor: 'ramping-arrival-rate',
      startRate: SCHEDULE[0].offered,
      timeUnit: '1s',
      stages: c.rampingStages(SCHEDULE),
      preAllocatedVUs: c.envInt('VUS', 50),
      maxVUs: c.envInt('MAX_VUS', 1000),
      exec: 'rest',
    },
  },
  tags: { arm: c.ARM, script: 'rest-control' },
  summaryTrendStats: c.TREND_STATS,
  thresholds: c.stageThresholds(SCHEDULE, LATENCY),
};

export function rest() {
  const stage = c.currentStage(SCHEDULE);
  const tags = { ...c.stageTags(stage), name: 'POST /echo' };
  const body = `${c.PAYLOAD}-${exec.vu.idInTest}-${exec.vu.iterationInScenario}`;
  c.echoSent.add(1, c.stageTags(stage));
  const res = http.post(URL, body, {
    headers: { 'Content-Type': 'text/plain', ...c.workMetadata(stage.name) },
    tags,
    timeout: c.CALL_TIMEOUT,
  });
  const ok = check(res, {
    'POST /echo status is 200': (r) => r.status === 200,
    'POST /echo echoes the body': (r) => r.status !== 200 || r.body === body,
  }, c.stageTags(stage));
  if (ok) {
    c.echoOk.add(1, c.stageTags(stage));
    c.recordTiming(res.headers, c.stageTags(stage), 'Echod-Timing');
  } else {
    c.echoFailed.add(1, c.stageTags(stage));
  }
}

export const handleSummary = c.summaryHandler('rest-control', SCHEDULE, LATENCY);
