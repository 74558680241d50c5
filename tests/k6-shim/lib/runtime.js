'use strict';
// State and behaviour of the k6 API subset the shim provides: metrics and samples, checks,
// tags, the VU and scenario context, timers that belong to a VU, and the stream bookkeeping
// that decides when an iteration is over (k6: when the VU's event loop is empty).

const fs = require('node:fs');
const path = require('node:path');

const state = {
  scriptPath: null,
  scriptDir: null,
  env: {},
  options: {},
  phase: 'init', // init | setup | run | teardown | summary
  vu: null, // the VU whose code runs now
  scenario: null, // { name, executor, startTime, tags, env, iterationsStarted }
  group: '',
  samples: [],
  metrics: new Map(),
  checks: new Map(), // name -> { passes, fails }
  errors: [], // iteration exceptions (text)
  testStart: Date.now(),
  iterationsCompleted: 0,
  iterationsInterrupted: 0,
  sinks: [], // functions(sample) (CSV writer)
  aborted: null,
  discard: false, // warm-up: samples are dropped (check failures still count)
};

// ---------------------------------------------------------------------------------------------
// metrics

const METRIC_NAME_RE = /^[a-zA-Z_][a-zA-Z0-9_]{0,127}$/;

function registerMetric(name, type, contains) {
  if (!METRIC_NAME_RE.test(name)) throw new Error(`invalid metric name ${JSON.stringify(name)}`);
  const m = state.metrics.get(name);
  if (m) {
    if (m.type !== type) throw new Error(`metric ${name} already registered as a ${m.type}`);
    return m;
  }
  const metric = { name, type, contains: contains || 'default' };
  state.metrics.set(name, metric);
  return metric;
}

const BUILTIN = {
  checks: ['rate'],
  iterations: ['counter'],
  dropped_iterations: ['counter'],
  iteration_duration: ['trend', 'time'],
  data_sent: ['counter', 'data'],
  data_received: ['counter', 'data'],
  vus: ['gauge'],
  grpc_req_duration: ['trend', 'time'],
  grpc_streams: ['counter'],
  grpc_streams_msgs_sent: ['counter'],
  grpc_streams_msgs_received: ['counter'],
  http_reqs: ['counter'],
  http_req_failed: ['rate'],
  http_req_duration: ['trend', 'time'],
  http_req_blocked: ['trend', 'time'],
  http_req_connecting: ['trend', 'time'],
  http_req_tls_handshaking: ['trend', 'time'],
  http_req_sending: ['trend', 'time'],
  http_req_waiting: ['trend', 'time'],
  http_req_receiving: ['trend', 'time'],
};

function builtin(name) {
  const [type, contains] = BUILTIN[name];
  return registerMetric(name, type, contains);
}

function toTagValue(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object') throw new Error('tag values must be strings, numbers or booleans');
  return String(v);
}

// Tags every sample of the current context carries (k6: test-wide tags, scenario tags, the
// VU's exec.vu.metrics.tags, the group and scenario system tags).
function contextTags() {
  const t = {};
  for (const [k, v] of Object.entries(state.options.tags || {})) t[k] = toTagValue(v);
  if (state.scenario) {
    for (const [k, v] of Object.entries(state.scenario.tags || {})) t[k] = toTagValue(v);
  }
  if (state.vu) {
    for (const [k, v] of Object.entries(state.vu.tags)) t[k] = toTagValue(v);
  }
  t.group = state.group;
  if (state.scenario) t.scenario = state.scenario.name;
  return t;
}

function userTags(tags) {
  const out = {};
  if (tags === undefined || tags === null) return out;
  if (typeof tags !== 'object') throw new Error('tags must be an object');
  for (const [k, v] of Object.entries(tags)) out[k] = toTagValue(v);
  return out;
}

function push(metric, value, tags, time) {
  if (typeof value === 'boolean') value = value ? 1 : 0;
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw new Error(`metric ${metric.name}: value ${JSON.stringify(value)} is not a number`);
  }
  if (state.discard) return;
  const sample = { metric: metric.name, time: time || Date.now(), value, tags };
  state.samples.push(sample);
  for (const sink of state.sinks) sink(sample, metric);
}

function mustRun(what) {
  if (state.phase === 'init') throw new Error(`${what} is not supported in the init context`);
}

class CustomMetric {
  constructor(type, name, isTime) {
    if (state.phase !== 'init') throw new Error('metrics must be declared in the init context');
    this._m = registerMetric(name, type, isTime ? 'time' : 'default');
    this.name = name;
  }

  add(value, tags) {
    mustRun(`${this._m.type}.add()`);
    push(this._m, value, { ...contextTags(), ...userTags(tags) });
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// checks, groups, sleep

function check(val, sets, tags) {
  mustRun('check()');
  const metric = builtin('checks');
  let all = true;
  for (const [name, fn] of Object.entries(sets || {})) {
    const ok = !!(typeof fn === 'function' ? fn(val) : fn);
    const entry = state.checks.get(name) || { passes: 0, fails: 0 };
    if (!ok) entry.fails++;
    else if (!state.discard) entry.passes++;
    state.checks.set(name, entry);
    push(metric, ok ? 1 : 0, { ...contextTags(), ...userTags(tags), check: name });
    if (!ok) all = false;
  }
  return all;
}

function group(name, fn) {
  mustRun('group()');
  const prev = state.group;
  state.group = `${prev}::${name}`;
  try {
    return fn();
  } finally {
    state.group = prev;
  }
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));
function sleep(seconds) {
  mustRun('sleep()');
  const ms = Math.max(0, Number(seconds) * 1000);
  if (ms > 0) Atomics.wait(sleepCell, 0, 0, ms);
}

function fail(msg) {
  throw new Error(msg || 'fail() called');
}

// ---------------------------------------------------------------------------------------------
// VUs: async work (timers, streams) keeps an iteration open; callbacks run as their VU

function newVU(id) {
  return {
    id, iter: -1, iterInScenario: -1, tags: {}, metadata: {}, pending: 0, waiters: [], module: null,
  };
}

function vuHold(vu) {
  vu.pending++;
}

function vuRelease(vu) {
  vu.pending--;
  if (vu.pending <= 0) {
    vu.pending = 0;
    const w = vu.waiters.splice(0);
    for (const fn of w) fn();
  }
}

function vuIdle(vu, timeoutMs) {
  if (vu.pending === 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = realSetTimeout(() => resolve(false), timeoutMs);
    vu.waiters.push(() => { clearRealTimeout(t); resolve(true); });
  });
}

// Runs fn as `vu` (a timer or stream callback): tags and exec.vu refer to it, and an exception
// interrupts its iteration the way k6 reports it.
function asVU(vu, fn, what) {
  const prevVU = state.vu;
  state.vu = vu;
  try {
    return fn();
  } catch (e) {
    iterationError(e, what);
    return undefined;
  } finally {
    state.vu = prevVU;
  }
}

function iterationError(e, where) {
  if (e && e.k6ShimAbort) throw e;
  const text = e && e.stack ? e.stack : String(e);
  state.errors.push(`${where || 'iteration'}: ${text}`);
  process.stderr.write(`k6-shim: ERROR (VU ${state.vu ? state.vu.id : '-'}) ${where || 'iteration'}: ${text}\n`);
}

const realSetTimeout = global.setTimeout;
const clearRealTimeout = global.clearTimeout;
const realSetInterval = global.setInterval;
const clearRealInterval = global.clearInterval;
const timers = new Map(); // shim id -> { handle, vu, interval }
let nextTimerId = 1;

function setTimeoutK6(fn, ms, ...args) {
  const vu = state.vu;
  const id = nextTimerId++;
  if (vu) vuHold(vu);
  const handle = realSetTimeout(() => {
    timers.delete(id);
    try {
      asVU(vu, () => fn(...args), 'setTimeout callback');
    } finally {
      if (vu) vuRelease(vu);
    }
  }, ms);
  timers.set(id, { handle, vu, interval: false });
  return id;
}

function setIntervalK6(fn, ms, ...args) {
  const vu = state.vu;
  const id = nextTimerId++;
  if (vu) vuHold(vu);
  const handle = realSetInterval(() => asVU(vu, () => fn(...args), 'setInterval callback'), ms);
  timers.set(id, { handle, vu, interval: true });
  return id;
}

function clearTimerK6(id) {
  const t = timers.get(id);
  if (!t) return;
  timers.delete(id);
  if (t.interval) clearRealInterval(t.handle); else clearRealTimeout(t.handle);
  if (t.vu) vuRelease(t.vu);
}

function clearVUTimers(vu) {
  for (const [id, t] of timers) if (t.vu === vu) clearTimerK6(id);
}

function installGlobals() {
  global.setTimeout = setTimeoutK6;
  global.setInterval = setIntervalK6;
  global.clearTimeout = clearTimerK6;
  global.clearInterval = clearTimerK6;
  global.open = (file, mode) => {
    if (state.phase !== 'init') throw new Error('open() is only available in the init context');
    const p = path.resolve(state.scriptDir, file);
    return mode === 'b' ? fs.readFileSync(p).buffer : fs.readFileSync(p, 'utf8');
  };
}

module.exports = {
  state, builtin, registerMetric, push, contextTags, userTags, CustomMetric,
  check, group, sleep, fail, mustRun,
  newVU, vuHold, vuRelease, vuIdle, asVU, iterationError, clearVUTimers, installGlobals,
  setTimeoutK6, setIntervalK6, clearTimerK6,
  realSetTimeout,
};
