#!/usr/bin/env node
'use strict';
/*
 * k6-shim: runs a k6 script for a few iterations under Node, with @grpc/grpc-js standing in for
 * k6/net/grpc. It is a test harness for echod's k6 scripts (deploy/k6), not a load generator:
 * scenarios are read but not scheduled (unless --schedule), and every API call is checked as
 * strictly as k6 checks it, so a script that calls a method the server does not have, passes a
 * parameter k6 rejects or misreads a response fails here too.
 *
 *   node tests/k6-shim/run.js SCRIPT [--target HOST:PORT] [--iterations N] [--vus N]
 *        [--env K=V]... [--scenario NAME] [--schedule] [--execution-segment A:B]
 *        [--max-lag-ms MS] [--start-at UNIX_MS | --start-file FILE] [--ready-file FILE]
 *        [--warmup-iterations N] [--out csv=FILE]
 *        [--summary-export FILE] [--iteration-timeout SECONDS] [--quiet]
 *
 * --target sets __ENV.TARGET. Each scenario's exec function (or `default`) runs --iterations
 * times (default 1) on each of --vus VUs (default 1); with --schedule, constant-arrival-rate and
 * ramping-arrival-rate scenarios start their iterations at the times k6 would (one VU, so only
 * low rates are honoured) and --iterations is ignored for them; --execution-segment 1/4:2/4
 * keeps that share of their iterations, as k6 does for one of several instances (run N shims
 * side by side to offer N VUs' worth of concurrency, with one --start-at so their steps line
 * up, or with --ready-file (written once warmed up) and --start-file (the start time, read when
 * it appears); deploy/report adds their CSVs up; --warmup-iterations N runs N unmeasured iterations
 * first, so connecting is not part of step 1). A scheduled iteration more than --max-lag-ms (1000)
 * late is dropped (dropped_iterations), as k6 drops what no free VU can start.
 *
 * Exit status: 0 all iterations ran without an exception and every check passed; 1 a check
 * failed or an iteration threw (unknown method, bad parameter, reading a missing field...);
 * 99 a threshold failed; 107 the script could not be loaded; 108 exec.test.abort().
 */

const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const { register } = require('node:module');

const rt = require('./lib/runtime');
const bridge = require('./lib/bridge');
const output = require('./lib/output');

function usage(msg) {
  if (msg) process.stderr.write(`k6-shim: ${msg}\n`);
  process.stderr.write('usage: node run.js SCRIPT [--target HOST:PORT] [--iterations N] [--vus N] '
    + '[--env K=V]... [--scenario NAME] [--schedule] [--execution-segment A:B] [--max-lag-ms MS] [--start-at UNIX_MS | --start-file F] [--ready-file F] [--warmup-iterations N] [--out csv=FILE] [--summary-export FILE] '
    + '[--iteration-timeout SECONDS] [--quiet]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { env: {}, iterations: 1, vus: 1, scenario: null, schedule: false, outs: [],
    summaryExport: null, iterationTimeoutS: 120, quiet: false, script: null, segment: null,
    maxLagMs: 1000, startAt: null, warmup: 0, readyFile: null, startFile: null };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    switch (arg) {
      case '--target': a.env.TARGET = val(); break;
      case '--iterations': case '-i': a.iterations = Number(val()); break;
      case '--vus': case '-u': a.vus = Number(val()); break;
      case '--env': case '-e': {
        const kv = val();
        const eq = kv.indexOf('=');
        if (eq <= 0) usage(`--env wants K=V, got ${kv}`);
        a.env[kv.slice(0, eq)] = kv.slice(eq + 1);
        break;
      }
      case '--scenario': a.scenario = val(); break;
      case '--schedule': a.schedule = true; break;
      case '--execution-segment': a.segment = parseSegment(val()); break;
      case '--max-lag-ms': a.maxLagMs = Number(val()); break;
      case '--start-at': a.startAt = Number(val()); break;
      case '--warmup-iterations': a.warmup = Number(val()); break;
      case '--ready-file': a.readyFile = val(); break;
      case '--start-file': a.startFile = val(); break;
      case '--out': case '-o': a.outs.push(val()); break;
      case '--summary-export': a.summaryExport = val(); break;
      case '--iteration-timeout': a.iterationTimeoutS = Number(val()); break;
      case '--quiet': case '-q': a.quiet = true; break;
      case '--help': case '-h': usage(); break;
      default:
        if (arg.startsWith('-') || a.script) usage(`unexpected argument ${arg}`);
        a.script = arg;
    }
  }
  if (!a.script) usage('no script given');
  if (!(a.iterations >= 0) || !(a.vus >= 1)) usage('--iterations must be >= 0 and --vus >= 1');
  return a;
}

// k6's --execution-segment FROM:TO (fractions like 1/4 or 0.25): this instance's share.
function parseSegment(text) {
  const frac = (x) => {
    const [n, d] = x.split('/');
    const v = d === undefined ? Number(n) : Number(n) / Number(d);
    if (!(v >= 0 && v <= 1)) usage(`bad execution segment ${text}`);
    return v;
  };
  const parts = text.split(':');
  const seg = parts.length === 1 ? [0, frac(parts[0])] : [frac(parts[0]), frac(parts[1])];
  if (!(seg[0] < seg[1])) usage(`bad execution segment ${text}`);
  return seg;
}

// Iteration i of an arrival-rate scenario belongs to the segment [from, to) when the segment's
// running share of iterations grows at i (spreads the share evenly over the schedule).
function inSegment(i, seg) {
  if (!seg) return true;
  const share = (n) => Math.floor(n * seg[1] + 1e-9) - Math.floor(n * seg[0] + 1e-9);
  return share(i + 1) > share(i);
}

function durationMs(v, what) {
  if (typeof v === 'number') return v;
  const s = String(v || '').trim();
  if (s === '0') return 0;
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|h|m|s)/g;
  let m;
  let used = 0;
  while ((m = re.exec(s))) {
    total += Number(m[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2]];
    used += m[0].length;
  }
  if (!s || used !== s.length) throw new Error(`${what}: bad duration ${JSON.stringify(v)}`);
  return total;
}

// Iteration start times (ms from the scenario start) of an arrival-rate scenario.
function arrivalOffsets(sc) {
  const unit = durationMs(sc.timeUnit || '1s', 'timeUnit');
  const out = [];
  if (sc.executor === 'constant-arrival-rate') {
    const d = durationMs(sc.duration, 'duration');
    const gap = unit / sc.rate;
    for (let t = 0; t < d; t += gap) out.push(t);
    out.endMs = d;
    return out;
  }
  let rate = (sc.startRate || 0) / unit; // iterations per ms
  let t0 = 0;
  let cum = 0;
  let next = 0;
  for (const stage of sc.stages || []) {
    const d = durationMs(stage.duration, 'stage duration');
    const r1 = stage.target / unit;
    if (d === 0) { rate = r1; continue; }
    const dt = Math.min(1, d / 1000);
    for (let t = 0; t < d; t += dt) {
      const r = rate + (r1 - rate) * (t / d);
      while (cum >= next) { out.push(t0 + t); next++; }
      cum += r * dt;
    }
    t0 += d;
    rate = r1;
  }
  out.endMs = t0;
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const scriptPath = path.resolve(args.script);
  if (!fs.existsSync(scriptPath)) usage(`no such script ${args.script}`);
  const st = rt.state;
  st.scriptPath = scriptPath;
  st.scriptDir = path.dirname(scriptPath);
  st.env = { ...process.env, ...args.env };
  global.__ENV = st.env;
  global.__VU = 0;
  global.__ITER = 0;
  rt.installGlobals();
  register('./loader.mjs', pathToFileURL(__filename));

  const sinks = [];
  for (const o of args.outs) {
    const m = /^csv=(.+)$/.exec(o);
    if (!m) usage(`only --out csv=FILE is supported, got ${o}`);
    const w = output.csvWriter(m[1], st.env.K6_CSV_TIME_FORMAT);
    sinks.push(w);
    st.sinks.push(w);
  }

  const vus = [];
  async function loadVU(id) {
    const vu = rt.newVU(id);
    st.phase = 'init';
    const url = `${pathToFileURL(scriptPath).href}?k6shim=1&vu=${id}`;
    global.__VU = id;
    try {
      vu.module = await import(url);
    } catch (e) {
      process.stderr.write(`k6-shim: could not load ${args.script}: ${e && e.stack ? e.stack : e}\n`);
      await bridge.stop();
      process.exit(107);
    }
    return vu;
  }

  bridge.call('ping', {}, 60000); // start the I/O worker (and load grpc-js there) before any VU runs
  vus.push(await loadVU(1));
  const mod = vus[0].module;
  st.options = mod.options || {};
  const trendStats = st.options.summaryTrendStats || ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)'];

  let scenarios;
  if (st.options.scenarios && Object.keys(st.options.scenarios).length) {
    scenarios = Object.entries(st.options.scenarios).map(([name, sc]) => ({ name, ...sc }));
  } else {
    scenarios = [{ name: 'default', executor: st.options.stages ? 'ramping-vus' : 'per-vu-iterations', exec: 'default' }];
  }
  if (args.scenario) {
    scenarios = scenarios.filter((s) => s.name === args.scenario);
    if (!scenarios.length) usage(`no scenario ${args.scenario} in options.scenarios`);
  }
  for (const sc of scenarios) {
    const fnName = sc.exec || 'default';
    if (typeof mod[fnName] !== 'function') {
      process.stderr.write(`k6-shim: scenario ${sc.name}: exec function ${fnName} is not exported by the script\n`);
      await bridge.stop();
      process.exit(104);
    }
  }
  while (vus.length < args.vus) vus.push(await loadVU(vus.length + 1));

  st.testStart = Date.now();
  let setupData;
  if (typeof mod.setup === 'function') {
    st.phase = 'setup';
    try {
      setupData = await mod.setup();
      setupData = setupData === undefined ? undefined : JSON.parse(JSON.stringify(setupData));
    } catch (e) {
      rt.iterationError(e, 'setup');
    }
  }

  const iterationTimeoutMs = args.iterationTimeoutS * 1000;
  async function runIteration(vu, fn) {
    vu.iter++;
    vu.iterInScenario++;
    st.scenario.iterationsStarted++;
    global.__VU = vu.id;
    global.__ITER = vu.iter;
    st.vu = vu;
    const t0 = Date.now();
    const errorsBefore = st.errors.length;
    try {
      const r = fn(setupData);
      if (r && typeof r.then === 'function') await r;
    } catch (e) {
      if (e && e.k6ShimAbort) throw e;
      st.vu = vu;
      rt.iterationError(e, `scenario ${st.scenario.name} iteration ${vu.iterInScenario}`);
    }
    st.vu = null;
    if (!(await rt.vuIdle(vu, iterationTimeoutMs))) {
      st.vu = vu;
      rt.iterationError(new Error(`still waiting for timers or streams after ${args.iterationTimeoutS} s`),
        `scenario ${st.scenario.name} iteration ${vu.iterInScenario}`);
      rt.clearVUTimers(vu);
    }
    st.vu = vu;
    const tags = rt.contextTags();
    rt.push(rt.builtin('iteration_duration'), Date.now() - t0, tags);
    if (st.errors.length === errorsBefore) {
      rt.push(rt.builtin('iterations'), 1, tags);
      st.iterationsCompleted++;
    } else {
      st.iterationsInterrupted++;
    }
    st.vu = null;
  }

  try {
    // Several shims as one run: each says it is ready (--ready-file) and waits for the start
    // time that someone writes into --start-file, or for a --start-at given up front.
    const waitForStart = async () => {
      if (args.readyFile) fs.writeFileSync(args.readyFile, `${process.pid}\n`);
      if (args.startFile) {
        const deadline = Date.now() + 300000;
        while (!fs.existsSync(args.startFile) || !fs.readFileSync(args.startFile, 'utf8').trim()) {
          if (Date.now() > deadline) throw new Error(`no start time in ${args.startFile} after 300 s`);
          await new Promise((r) => rt.realSetTimeout(r, 20));
        }
        args.startAt = Number(fs.readFileSync(args.startFile, 'utf8').trim());
      }
      const wait = args.startAt - Date.now();
      if (wait > 0) await new Promise((r) => rt.realSetTimeout(r, wait));
    };
    const synced = () => args.startAt || args.startFile || args.readyFile;
    for (const sc of scenarios) {
      const scheduled = args.schedule && ['constant-arrival-rate', 'ramping-arrival-rate'].includes(sc.executor);
      const all = scheduled ? arrivalOffsets(sc) : null;
      const offsets = scheduled ? all.filter((_, i) => inSegment(i, args.segment)) : null;
      const total = scheduled ? offsets.length : args.iterations * vus.length;
      const first = sc === scenarios[0];
      st.scenario = { name: sc.name, executor: sc.executor || 'per-vu-iterations', startTime: Date.now(),
        tags: sc.tags || {}, iterationsStarted: 0, progress: () => (total ? st.scenario.iterationsStarted / total : 1) };
      global.__ENV = { ...st.env, ...(sc.env || {}) };
      st.phase = 'run';
      for (const vu of vus) vu.iterInScenario = -1;
      const fn = (vu) => vu.module[sc.exec || 'default'];
      if (scheduled) {
        // One VU: an iteration that falls due more than --max-lag-ms before the VU is free is
        // dropped and counted in dropped_iterations, as k6 does when an arrival-rate scenario
        // has no free VU (the lag stands for the spare VUs k6 would have).
        const vu = vus[0];
        if (args.warmup > 0) {
          // unmeasured iterations first (connection, reflection, JIT), then the clock starts
          st.discard = true;
          for (let k = 0; k < args.warmup; k++) await runIteration(vu, fn(vu));
          st.discard = false;
          st.scenario.iterationsStarted = 0;
          vu.iterInScenario = -1;
        }
        if (synced() && first) await waitForStart();
        st.scenario.startTime = args.startAt && first ? args.startAt : Date.now();
        let dropped = 0;
        for (const off of offsets) {
          const wait = st.scenario.startTime + off - Date.now();
          if (wait > 0) await new Promise((r) => rt.realSetTimeout(r, wait));
          else if (wait < -args.maxLagMs || Date.now() >= st.scenario.startTime + all.endMs) {
            // too late, or the scenario is over (k6 starts no iteration after its end)
            dropped++;
            st.vu = null;
            rt.push(rt.builtin('dropped_iterations'), 1, rt.contextTags());
            continue;
          }
          await runIteration(vu, fn(vu));
        }
        if (dropped) process.stderr.write(`k6-shim: scenario ${sc.name}: ${dropped} iterations dropped (more than ${args.maxLagMs} ms late or after the end)\n`);
      } else {
        if (synced() && first) await waitForStart();
        st.scenario.startTime = args.startAt && first ? args.startAt : Date.now();
        for (let k = 0; k < args.iterations; k++) {
          await Promise.all(vus.map((vu) => runIteration(vu, fn(vu))));
        }
      }
    }
    global.__ENV = st.env;
    if (typeof mod.teardown === 'function') {
      st.phase = 'teardown';
      try {
        await mod.teardown(setupData);
      } catch (e) {
        rt.iterationError(e, 'teardown');
      }
    }
  } catch (e) {
    if (!(e && e.k6ShimAbort)) throw e;
  }

  const durationMsTotal = Date.now() - st.testStart;
  st.phase = 'summary';
  for (const s of sinks) s.close();
  const { data, thresholdsFailed } = output.buildSummary(st, trendStats, durationMsTotal);
  if (args.summaryExport) fs.writeFileSync(args.summaryExport, JSON.stringify(data, null, 2));
  if (typeof mod.handleSummary === 'function') {
    let outs;
    try {
      outs = mod.handleSummary(data);
    } catch (e) {
      rt.iterationError(e, 'handleSummary');
      outs = {};
    }
    for (const [dest, content] of Object.entries(outs || {})) {
      const text = typeof content === 'string' ? content : JSON.stringify(content);
      if (dest === 'stdout') process.stdout.write(text);
      else if (dest === 'stderr') process.stderr.write(text);
      else fs.writeFileSync(path.resolve(dest), text);
    }
  } else if (!args.quiet) {
    process.stdout.write(output.textSummary(data));
  }

  const passes = [...st.checks.values()].reduce((a, c) => a + c.passes, 0);
  const fails = [...st.checks.values()].reduce((a, c) => a + c.fails, 0);
  process.stderr.write(`k6-shim: ${args.script}: ${st.iterationsCompleted} iterations completed, `
    + `${st.iterationsInterrupted} interrupted, ${passes} checks passed, ${fails} failed, `
    + `${st.errors.length} errors${thresholdsFailed ? ', thresholds failed' : ''}\n`);
  for (const [name, c] of st.checks) {
    if (c.fails) process.stderr.write(`k6-shim: check failed ${c.fails} time(s): ${name}\n`);
  }
  await bridge.stop();
  let code = 0;
  if (st.aborted) code = 108;
  else if (st.errors.length || fails) code = 1;
  else if (thresholdsFailed) code = 99;
  process.exit(code);
}

main().catch(async (e) => {
  process.stderr.write(`k6-shim: ${e && e.stack ? e.stack : e}\n`);
  try { await bridge.stop(); } catch (_) { /* ignore */ }
  process.exit(1);
});
