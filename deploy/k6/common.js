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
// 0 (the default): the types from PROTO_DIR/echo.proto, shipped beside the scripts; 1: from the
// server's reflection, one reflection call per VU's connection (see reflectOnce for k6's race)
export const REFLECT = env('REFLECT', '0') !== '0';
export const UNARY = 'grpc.examples.echo.Echo/UnaryEcho';
export const BIDI = 'grpc.examples.echo.Echo/BidirectionalStreamingEcho';
export const PAYLOAD = env('PAYLOAD', 'hello');
export const CALL_TIMEOUT = env('CALL_TIMEOUT', '10s');
export const TREND_STATS = ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)', 'p(99.9)', 'count'];

// Synthetic work for every call (the echod-* metadata knobs, README: Synthetic work), e.g. WORK_CPU_US=50;
// WORK_SLEEP_DIST=stall WORK_SLEEP_STALL_FRACTION=0.02 WORK_SLEEP_STALL_US=300000 stalls 2% of the calls.
export function workMetadata(stageName) {
  const md = { 'echod-stage': stageName };
  const map = {
    WORK_CPU_US: 'echod-cpu-us',
    WORK_SLEEP_US: 'echod-sleep-us',
    WORK_SLEEP_DIST: 'echod-sleep-dist',
    WORK_SLEEP_STALL_FRACTION: 'echod-sleep-stall-fraction',
    WORK_SLEEP_STALL_US: 'echod-sleep-stall-us',
    WORK_RESPONSE_BYTES: 'echod-response-bytes',
  };
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

// ramping-arrival-rate stages holding each step for its duration, with instant jumps between,
// and an idle second after the last step. k6 starts the schedule's last iteration at the
// schedule's very end, just after it has ended the scenario's regular duration (its clock
// starts a little before the schedule's, by the time it takes to activate the VUs), so without
// the idle second it is never started nor counted as dropped; and a last step whose iterations
// k6 adds up in floating point to a hair under offered x duration (30/s for 1 s: 29.999...)
// loses its last one too, which the 1 µs ramp down absorbs (it schedules none of its own below
// 2,000,000/s). So every iteration of the schedule is started or dropped.
export function rampingStages(schedule) {
  const stages = warmup.n ? [{ target: warmup.rate, duration: `${warmup.s}s` }, { target: schedule[0].offered, duration: '0s' }] : [];
  schedule.forEach((s, i) => {
    if (i > 0) stages.push({ target: s.offered, duration: '0s' });
    stages.push({ target: s.offered, duration: `${s.duration_s}s` });
  });
  stages.push({ target: 0, duration: '1us' }, { target: 0, duration: '1s' });
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
// every sample of a call carries `slice` (00, 01, ...: the interval its call was due in: dueStage).
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

// A ramp's warm-up (unary-ramp.js, WARMUP_RATE): the scenario's first `n` iterations, `s`
// seconds at `rate` before the schedule's first step, one on each pre-allocated VU. In k6 v0.53
// a VU's first checked, tagged call in a scenario costs k6 about twice a later one: with 10,000
// VUs at 200 calls/s, 0.61-0.75 of its core through the first pass over the VUs and 0.31-0.39
// after it, and 0.3 MB more memory a VU. A bare client.invoke in the warm-up, or a call in the
// `connect` scenario, saved nothing; the same unaryEcho as a step's call does. Without it the
// steps that come first would measure k6. The schedule's clock and its iteration numbers start
// after it (dueNow, unaryEcho). Init code (every VU sets the same).
let warmup = { n: 0, s: 0, rate: 0 };
export function setWarmup(rate, vus) {
  if (rate > 0 && vus > 0) {
    const r = Math.min(rate, vus); // at least a second, and no VU warmed twice over
    const s = Math.ceil(vus / r);
    warmup = { n: r * s, s, rate: r };
  }
  return warmup;
}

// A warm-up iteration: a step's call (unaryEcho) in the stage `warmup`, tagged warmup=1, which
// no step counts (deploy/report drops it), and with no synthetic work or cost model on the
// server (metadata over the config's).
const WARMUP_STAGE = 'warmup';
const WARMUP_METADATA = { 'echod-cpu-us': '0', 'echod-sleep-us': '0', 'echod-model': 'false' };
export function warmupCall(client) {
  unaryEcho(client, { name: WARMUP_STAGE, offered: warmup.rate, duration_s: warmup.s }, { warmup: '1' },
    undefined, WARMUP_METADATA);
}

// True for the iteration running now when it is one of the warm-up's. VU code only.
export function inWarmup() {
  return exec.scenario.iterationInTest < warmup.n;
}

// A call of a ramp (rampingStages) counts in the step its iteration was due in, not in the one
// running when k6 got round to starting it: on a busy machine calls due at the end of a step
// start in the next (8 of 150 seen, and a false knee), and the last iteration of every step is
// due at the step's very end. k6 numbers a scenario's iterations across all its execution
// segments (exec.scenario.iterationInTest, from 0), and ramping-arrival-rate starts number n
// at start_s + (n + 1 - before) / offered of the step whose iterations run up to n + 1, where
// `before` counts the iterations of the steps before it (k6's lib/executor/
// ramping_arrival_rate.go): so per step the runners' calls add up to offered x duration
// exactly. k6 numbers only the iterations it starts, though: one it drops (no free VU) takes
// no number, and after drops a runner's numbers run behind the schedule. A call that starts
// more than LATE_S later than its number was due (beyond the lag below) is taken for such a
// lag and counted by when it started, so after n drops a step's calls are right to within n
// (and LATE_S of calls), as by start time they would be right to within the VUs' lateness.
export const LATE_S = 1;

// k6 starts a scenario's clock (exec.scenario.startTime) and then the schedule's, having
// activated the pre-allocated VUs in between (0.14 ms a VU measured here: 283 ms for 2,000), so
// every call starts at least that late. A VU's least lag so far stands for it: pre-allocated
// VUs wait from the ramp's start, and k6 drops an iteration only when none waits, so a VU's
// first iteration comes before any drop (and a VU k6 adds later, after drops, places its calls
// to within them).
let leastLag = Infinity;

// {stage, t, lag}: the step iteration n was due in, when (seconds on the scenario's clock) and
// how late nowS is for it; or, when that is more than LATE_S beyond `punctual` (the lag of a
// call on time), the step running at nowS less `punctual`.
export function dueStage(schedule, n, nowS, punctual) {
  let before = 0;
  let lag;
  for (const s of schedule) {
    const count = s.offered * s.duration_s;
    if (n + 1 <= before + count + 1e-9) {
      const t = s.start_s + (n + 1 - before) / s.offered;
      lag = nowS - t;
      if (punctual === undefined || lag - punctual <= LATE_S) return { stage: s, t, lag };
      break;
    }
    before += count;
  }
  const t = nowS - (punctual === undefined ? 0 : punctual);
  return { stage: stageAt(schedule, 0, t * 1000), t, lag };
}

// dueStage of the iteration running now. VU code only.
export function dueNow(schedule) {
  const nowS = (Date.now() - exec.scenario.startTime) / 1000 - warmup.s;
  const d = dueStage(schedule, exec.scenario.iterationInTest - warmup.n, nowS, Number.isFinite(leastLag) ? leastLag : undefined);
  if (d.lag !== undefined && d.lag < leastLag) leastLag = d.lag;
  return d;
}

// How far the schedule's clock runs behind the scenario's (0 before a first dueNow, and for the
// constant-arrival-rate scripts, whose schedule runs on the scenario's clock). VU code only.
export function scheduleLagMs() {
  return Number.isFinite(leastLag) ? Math.max(0, leastLag) * 1000 : 0;
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
// answered OK, counted in the stage the answer arrived in (echo_ok: the stage it was due in):
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
  if (!REFLECT) {
    const dir = env('PROTO_DIR', '../../proto');
    try {
      client.load([dir], 'echo.proto');
    } catch (e) {
      throw new Error(`cannot load echo.proto from PROTO_DIR=${dir} (a relative one is taken from ` +
        `the scripts' directory): ${e}; set PROTO_DIR to the directory that holds it (proto/ of ` +
        'the repository, /scripts in the ConfigMap) or REFLECT=1 to take the types from the server');
    }
  }
  return client;
}

// For setup(): with REFLECT=1, one connection that takes the server's types before any VU
// connects. k6 before v1.2.0 keeps reflected types in one registry per process and adds each
// after looking it up, without a lock, and panics when two VUs' first connections add the same
// type at once (grafana/k6#3961, fixed in v1.2.0): the process exits 2 at the run's first
// connections, the more likely the busier the machine. Once the types are in, every later
// connection finds them. A process that skips setup (k6 run --no-setup) is not covered:
// deploy/README.md, "k6 versions".
export function reflectOnce(client) {
  if (!REFLECT) return;
  connect(client);
  client.close();
}

export function connect(client) {
  const params = { plaintext: true, reflect: REFLECT, timeout: env('CONNECT_TIMEOUT', '10s') };
  const sharing = env('CONN_SHARING', '');
  if (sharing !== '') params.connectionSharing = Number(sharing);
  client.connect(TARGET, params);
}

// One UnaryEcho, checked and tagged with the stage; returns true when it was answered right.
// Given the schedule, an answer is also counted in echo_answered by the stage it arrived in
// (on the schedule's clock, scheduleLagMs; none after the schedule's end). `metadata` goes over
// the WORK_* keys.
export function unaryEcho(client, stage, extraTags, schedule, metadata) {
  const tags = { ...stageTags(stage), ...(extraTags || {}) };
  const message = `${PAYLOAD}-${exec.vu.idInTest}-${exec.vu.iterationInScenario}`;
  echoSent.add(1, tags);
  const res = client.invoke(UNARY, { message }, { metadata: { ...workMetadata(stage.name), ...(metadata || {}) }, tags, timeout: CALL_TIMEOUT });
  const ok = check(res, {
    'UnaryEcho status is OK': (r) => r.status === grpc.StatusOK,
    'UnaryEcho echoes the message': (r) => r.status !== grpc.StatusOK || r.message.message === message,
  }, tags);
  if (ok) echoOk.add(1, tags); else echoFailed.add(1, tags);
  if (ok && schedule) {
    const now = Date.now();
    const origin = exec.scenario.startTime + warmup.s * 1000 + scheduleLagMs();
    if (now - origin < totalSeconds(schedule) * 1000) echoAnswered.add(1, stageTags(stageAt(schedule, origin, now)));
  }
  if (res.status === grpc.StatusOK) recordTiming(res.trailers, tags);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// summary: per-stage submetrics (thresholds with no condition make k6 keep them) and JSON out

export function stageThresholds(schedule, latencyMetric, extra) {
  // a run that got no answer (a wrong TARGET, a server down throughout) exits 99, not 0, so a
  // Job or a script does not read it as a measurement; any answer passes: past capacity a
  // ramp's failures are its figures
  const th = { echo_ok: ['count>0'] };
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
