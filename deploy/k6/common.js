// Shared by echod's k6 scripts (deploy/k6/*.js): environment, the stepped load schedule and its
// stage tags, the echod-timing trailer, the per-stage submetrics and handleSummary's JSON.
//
// Every sample a script emits carries `arm` (ARM env, test-wide tag) and, for load samples,
// `stage` (s01, s02, ... or `fixed`) and `offered` (the stage's offered rate per second), so a
// CSV written with `--out csv=FILE` and the JSON of handleSummary can both be cut by stage.
// deploy/report reads either.
//
// Needs k6 v0.53.0 or later (object spread; k6/timers from v0.50). An older k6 rejects the
// script before any line of it runs, so it cannot say so itself: deploy/README.md, "k6 versions".

import grpc from 'k6/net/grpc';
import { check } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';

export function env(name, dflt) {
  const v = __ENV[name];
  return v === undefined || v === '' ? dflt : v;
}

export function envInt(name, dflt) {
  const raw = env(name, undefined);
  if (raw === undefined) return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return n;
}

// '2m', '30s', '1m30s', '500ms', '1h'; a bare number is seconds. -> seconds
export function parseDuration(text) {
  const s = String(text).trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  let total = 0;
  let used = 0;
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let m;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
    used += m[0].length;
  }
  if (!s || used !== s.length) throw new Error(`bad duration ${JSON.stringify(text)}`);
  return total;
}

export const ARM = env('ARM', 'unknown');
export const TARGET = env('TARGET', 'localhost:50051');
export const REFLECT = env('REFLECT', '1') !== '0';
export const UNARY = 'grpc.examples.echo.Echo/UnaryEcho';
export const BIDI = 'grpc.examples.echo.Echo/BidirectionalStreamingEcho';
export const PAYLOAD = env('PAYLOAD', 'hello');
export const CALL_TIMEOUT = env('CALL_TIMEOUT', '10s');
export const TREND_STATS = ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)', 'p(99.9)', 'count'];

// Synthetic work for every call (the echod-* metadata knobs, README: Synthetic work), e.g. WORK_CPU_US=50.
export function workMetadata(stageName) {
  const md = { 'echod-stage': stageName };
  const map = { WORK_CPU_US: 'echod-cpu-us', WORK_SLEEP_US: 'echod-sleep-us', WORK_RESPONSE_BYTES: 'echod-response-bytes' };
  for (const [k, h] of Object.entries(map)) {
    const v = env(k, '');
    if (v !== '') md[h] = String(v);
  }
  return md;
}

// ---------------------------------------------------------------------------------------------
// the stepped schedule

// [{ name: 's01', offered: 200, start_s: 0, duration_s: 120 }, ...]: one step per rate.
export function scheduleOf(rates, stepSeconds) {
  return rates.map((r, i) => ({ name: `s${String(i + 1).padStart(2, '0')}`, offered: r, start_s: i * stepSeconds, duration_s: stepSeconds }));
}

// The steps from START to END by STEP.
export function stepSchedule(start, end, step, stepSeconds) {
  if (step <= 0 || start <= 0 || end < start) throw new Error(`bad ramp START=${start} END=${end} STEP=${step}`);
  const rates = [];
  for (let r = start; r <= end; r += step) rates.push(r);
  return scheduleOf(rates, stepSeconds);
}

// ramping-arrival-rate stages holding each step for its duration, with instant jumps between.
export function rampingStages(schedule) {
  const stages = [];
  schedule.forEach((s, i) => {
    if (i > 0) stages.push({ target: s.offered, duration: '0s' });
    stages.push({ target: s.offered, duration: `${s.duration_s}s` });
  });
  return stages;
}

// The schedule a ramp script runs: RATES (a comma-separated list of offered rates, one step
// each: what bench/study passes, whose steps are not evenly spaced) or else START, END and STEP
// with the script's defaults; every step held for STEP_DURATION.
export function scheduleFromEnv(start, end, step, stepDuration) {
  const seconds = parseDuration(env('STEP_DURATION', stepDuration));
  const rates = env('RATES', '');
  if (rates === '') return stepSchedule(envInt('START', start), envInt('END', end), envInt('STEP', step), seconds);
  const list = rates.split(',').map((r) => Number(r.trim()));
  if (!list.length || list.some((r) => !Number.isInteger(r) || r <= 0)) throw new Error(`RATES must be positive integers, got ${JSON.stringify(rates)}`);
  return scheduleOf(list, seconds);
}

// Intervals of SLICE_SECONDS inside every step (0: none), so a report can show a tail growing
// through a step, as an open queue's does: each step gets `slices` (how many) and `slice_s`, and
// every sample of a call carries `slice` (00, 01, ...: the interval its call was sent in).
export function addSlices(schedule, sliceSeconds) {
  for (const s of schedule) {
    s.slices = sliceSeconds > 0 ? Math.ceil(s.duration_s / sliceSeconds - 1e-9) : 0;
    s.slice_s = sliceSeconds > 0 ? sliceSeconds : 0;
  }
  return schedule;
}

export function sliceName(k) {
  return String(k).padStart(2, '0');
}

// The slice of `stage` that `t` seconds after the schedule's start falls in ('' without slices).
export function sliceAt(stage, t) {
  if (!stage.slices) return '';
  return sliceName(Math.min(stage.slices - 1, Math.max(0, Math.floor((t - stage.start_s) / stage.slice_s))));
}

export function totalSeconds(schedule) {
  const last = schedule[schedule.length - 1];
  return last.start_s + last.duration_s;
}

// The stage running now, by the time since the scenario started (absolute, not per VU).
export function stageAt(schedule, startMs, nowMs) {
  const t = ((nowMs === undefined ? Date.now() : nowMs) - startMs) / 1000;
  for (let i = schedule.length - 1; i >= 0; i--) {
    if (t >= schedule[i].start_s) return schedule[i];
  }
  return schedule[0];
}

export function currentStage(schedule) {
  return stageAt(schedule, exec.scenario.startTime);
}

// This runner's execution segment ('0:1' when the test is not split), from k6's own options
// (the k6-operator and k8s/k6/make-run pass --execution-segment): runners of one test differ by
// it, so their samples can be merged and their Prometheus series do not collide. VU code only.
let segmentTags;
export function runnerTags() {
  if (segmentTags === undefined) {
    const o = exec.test.options;
    segmentTags = { segment: o.executionSegment ? String(o.executionSegment) : '0:1' };
    if (o.executionSegmentSequence) segmentTags.segments = String(o.executionSegmentSequence);
  }
  return segmentTags;
}

// step_s: the step's length in the schedule, so that a step's rates never depend on the
// samples' clock (k6's CSV has whole-second timestamps by default).
export function stageTags(stage) {
  return { stage: stage.name, offered: String(stage.offered), step_s: String(stage.duration_s), ...runnerTags() };
}

// ---------------------------------------------------------------------------------------------
// metrics

export const echoSent = new Counter('echo_sent');          // calls or messages sent
export const echoOk = new Counter('echo_ok');              // answered OK with the same message
export const echoFailed = new Counter('echo_failed');      // answered wrongly or not at all
// answered OK, counted in the stage the answer arrived in (echo_ok: the stage it was sent in):
// a step's goodput when its calls are answered after it ends, as past capacity they are
export const echoAnswered = new Counter('echo_answered');
export const serverQueue = new Trend('server_queue_us');   // echod-timing queue=
export const serverHandler = new Trend('server_handler_us'); // echod-timing handler=
export const serverTotal = new Trend('server_total_us');   // echod-timing total=
export const timingMissing = new Counter('server_timing_missing');

// First value of a metadata key, from k6's {key: [values]} (or a plain string).
export function mdValue(md, key) {
  if (!md) return undefined;
  const v = md[key] !== undefined ? md[key] : md[key.toLowerCase()];
  if (Array.isArray(v)) return v.length ? String(v[0]) : undefined;
  return v === undefined || v === null ? undefined : String(v);
}

const UNIT_US = { ns: 0.001, us: 1, 'µs': 1, ms: 1000, s: 1000000 };

// 'queue=12us;handler=3us;total=40us' -> { queue: 12, handler: 3, total: 40 } (microseconds)
export function parseTiming(text) {
  const out = {};
  for (const part of String(text).split(/[;,]/)) {
    const m = /^\s*([a-z_]+)\s*=\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*$/.exec(part);
    if (m) out[m[1]] = Number(m[2]) * UNIT_US[m[3] || 'us'];
  }
  return out;
}

// Records the server's own view of a call from its echod-timing trailer (or header); counts
// the calls that had none.
export function recordTiming(md, tags, key) {
  const text = mdValue(md, key || 'echod-timing');
  if (text === undefined) {
    timingMissing.add(1, tags);
    return null;
  }
  const t = parseTiming(text);
  if (t.queue !== undefined) serverQueue.add(t.queue, tags);
  if (t.handler !== undefined) serverHandler.add(t.handler, tags);
  if (t.total !== undefined) serverTotal.add(t.total, tags);
  return t;
}

// ---------------------------------------------------------------------------------------------
// gRPC client and a checked unary call

export function newClient() {
  const client = new grpc.Client();
  if (!REFLECT) client.load([env('PROTO_DIR', '../../proto')], 'echo.proto');
  return client;
}

export function connect(client) {
  const params = { plaintext: true, reflect: REFLECT, timeout: env('CONNECT_TIMEOUT', '10s') };
  const sharing = env('CONN_SHARING', '');
  if (sharing !== '') params.connectionSharing = Number(sharing);
  client.connect(TARGET, params);
}

// One UnaryEcho, checked and tagged with the stage; returns true when it was answered right.
// Given the schedule, an answer is also counted in echo_answered by the stage it arrived in
// (none after the schedule's end).
export function unaryEcho(client, stage, extraTags, schedule) {
  const tags = { ...stageTags(stage), ...(extraTags || {}) };
  const message = `${PAYLOAD}-${exec.vu.idInTest}-${exec.vu.iterationInScenario}`;
  echoSent.add(1, tags);
  const res = client.invoke(UNARY, { message }, { metadata: workMetadata(stage.name), tags, timeout: CALL_TIMEOUT });
  const ok = check(res, {
    'UnaryEcho status is OK': (r) => r.status === grpc.StatusOK,
    'UnaryEcho echoes the message': (r) => r.status !== grpc.StatusOK || r.message.message === message,
  }, tags);
  if (ok) echoOk.add(1, tags); else echoFailed.add(1, tags);
  if (ok && schedule) {
    const now = Date.now();
    const origin = exec.scenario.startTime;
    if (now - origin < totalSeconds(schedule) * 1000) echoAnswered.add(1, stageTags(stageAt(schedule, origin, now)));
  }
  if (res.status === grpc.StatusOK) recordTiming(res.trailers, tags);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// summary: per-stage submetrics (thresholds with no condition make k6 keep them) and JSON out

export function stageThresholds(schedule, latencyMetric, extra) {
  const th = {};
  const metrics = [latencyMetric, 'echo_sent', 'echo_ok', 'echo_failed', 'server_queue_us', 'server_handler_us',
    'server_total_us', ...(extra || [])];
  for (const s of schedule) {
    for (const m of metrics) th[`${m}{stage:${s.name}}`] = [];
    // the latency of the calls sent in each slice of the step (addSlices)
    for (let k = 0; k < (s.slices || 0); k++) th[`${latencyMetric}{stage:${s.name},slice:${sliceName(k)}}`] = [];
  }
  return th;
}

function textSummary(script, data, schedule, latencyMetric) {
  const lines = [`${script} against ${TARGET} (arm ${ARM})`, 'stage  offered/s  sent  ok  failed  p50 ms  p99 ms  server p99 us'];
  const m = data.metrics;
  const v = (name, stat) => (m[name] && m[name].values[stat] !== undefined ? m[name].values[stat] : undefined);
  const f = (x, d) => (x === undefined ? '-' : x.toFixed(d));
  for (const s of schedule) {
    const k = (name) => `${name}{stage:${s.name}}`;
    lines.push(`${s.name.padEnd(6)} ${String(s.offered).padStart(9)} ${f(v(k('echo_sent'), 'count'), 0).padStart(5)} `
      + `${f(v(k('echo_ok'), 'count'), 0).padStart(4)} ${f(v(k('echo_failed'), 'count'), 0).padStart(7)} `
      + `${f(v(k(latencyMetric), 'med'), 3).padStart(7)} ${f(v(k(latencyMetric), 'p(99)'), 3).padStart(7)} `
      + `${f(v(k('server_total_us'), 'p(99)'), 0).padStart(14)}`);
  }
  const checks = (data.root_group.checks || []).map((c) => `  ${c.fails ? 'FAIL' : 'ok  '} ${c.name}: ${c.passes} passed, ${c.fails} failed`);
  return `${lines.concat(checks).join('\n')}\n`;
}

// handleSummary for a script: a short table on stdout and, in SUMMARY_FILE (default
// summary-ARM-SCRIPT.json; "-" for none), {echod_k6: 1, script, arm, target, latency_metric,
// schedule, summary: <k6's summary data>}. SUMMARY_STDOUT=1 also prints that JSON on one
// stdout line starting with "K6_SUMMARY_JSON " (how the Kubernetes Job hands it over).
export function summaryHandler(script, schedule, latencyMetric) {
  return function handleSummary(data) {
    const doc = { echod_k6: 1, script, arm: ARM, target: TARGET, latency_metric: latencyMetric, schedule, ...runnerTags(), summary: data };
    let text = textSummary(script, data, schedule, latencyMetric);
    if (env('SUMMARY_STDOUT', '0') === '1') text += `K6_SUMMARY_JSON ${JSON.stringify(doc)}\n`;
    const out = { stdout: text };
    const file = env('SUMMARY_FILE', `summary-${ARM}-${script}.json`);
    if (file !== '-') out[file] = JSON.stringify(doc, null, 1);
    return out;
  };
}
