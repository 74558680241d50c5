'use strict';
// Machine-readable output as k6 writes it: `--out csv=FILE` (k6's CSV output: the default
// system tags as columns, the other tags as k=v&k=v in extra_tags, non-indexable ones in
// metadata) and the data object handed to handleSummary().

const fs = require('node:fs');

// k6's default system tags that are CSV columns, in the order k6 writes them (sorted).
const CSV_TAG_COLUMNS = ['check', 'error', 'error_code', 'expected_response', 'group', 'method', 'name',
  'proto', 'scenario', 'service', 'status', 'subproto', 'tls_version', 'url'];
const CSV_HEADER = ['metric_name', 'timestamp', 'metric_value', ...CSV_TAG_COLUMNS, 'extra_tags', 'metadata'];
// Non-indexable system tags (k6 puts them in `metadata` when enabled; off by default).
const IGNORED = new Set(['vu', 'iter']);

function csvField(s) {
  // encoding/csv: quote a field with a comma, quote, CR/LF or a leading space
  if (s === '' || !/[",\r\n]/.test(s) && s[0] !== ' ') return s;
  return `"${s.replace(/"/g, '""')}"`;
}

function formatTime(ms, fmt) {
  switch (fmt || 'unix') {
    case 'unix': return String(Math.floor(ms / 1000));
    case 'unix_milli': return String(Math.floor(ms));
    case 'unix_micro': return String(Math.floor(ms * 1000));
    case 'unix_nano': return (BigInt(Math.floor(ms * 1000)) * 1000n).toString();
    case 'rfc3339': return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
    case 'rfc3339_nano': return new Date(ms).toISOString();
    default: throw new Error(`unknown CSV time format ${fmt}`);
  }
}

function csvWriter(file, timeFormat) {
  const fd = fs.openSync(file, 'w');
  fs.writeSync(fd, `${CSV_HEADER.join(',')}\n`);
  let buf = [];
  const flush = () => {
    if (buf.length) fs.writeSync(fd, buf.join(''));
    buf = [];
  };
  const sink = (sample) => {
    const row = [sample.metric, formatTime(sample.time, timeFormat), sample.value.toFixed(6)];
    for (const col of CSV_TAG_COLUMNS) row.push(sample.tags[col] || '');
    const extra = [];
    for (const [k, v] of Object.entries(sample.tags)) {
      if (!CSV_TAG_COLUMNS.includes(k) && !IGNORED.has(k)) extra.push(`${k}=${v}`);
    }
    row.push(extra.join('&'), '');
    buf.push(`${row.map(csvField).join(',')}\n`);
    if (buf.length >= 512) flush();
  };
  sink.close = () => { flush(); fs.closeSync(fd); };
  return sink;
}

// ---------------------------------------------------------------------------------------------
// summary

function percentile(sorted, p) {
  // k6's TrendSink.P: linear interpolation between the closest ranks
  const n = sorted.length;
  if (n === 0) return 0;
  if (n === 1) return sorted[0];
  const i = p * (n - 1);
  const lo = sorted[Math.floor(i)];
  const hi = sorted[Math.ceil(i)];
  return lo + (hi - lo) * (i - Math.floor(i));
}

function trendStat(sorted, stat) {
  const n = sorted.length;
  if (stat === 'count') return n;
  if (n === 0) return 0;
  switch (stat) {
    case 'avg': return sorted.reduce((a, b) => a + b, 0) / n;
    case 'min': return sorted[0];
    case 'max': return sorted[n - 1];
    case 'med': return percentile(sorted, 0.5);
    default: {
      const m = /^p\((\d+(?:\.\d+)?)\)$/.exec(stat);
      if (!m) throw new Error(`bad summaryTrendStats entry ${stat}`);
      return percentile(sorted, Number(m[1]) / 100);
    }
  }
}

function values(metric, samples, trendStats, durationS) {
  const vals = samples.map((s) => s.value);
  switch (metric.type) {
    case 'counter': {
      const count = vals.reduce((a, b) => a + b, 0);
      return { count, rate: durationS > 0 ? count / durationS : 0 };
    }
    case 'gauge':
      return { value: vals.length ? vals[vals.length - 1] : 0, min: Math.min(...vals), max: Math.max(...vals) };
    case 'rate': {
      const passes = vals.filter((v) => v !== 0).length;
      return { rate: vals.length ? passes / vals.length : 0, passes, fails: vals.length - passes };
    }
    default: {
      const sorted = vals.slice().sort((a, b) => a - b);
      const out = {};
      for (const st of trendStats) out[st] = trendStat(sorted, st);
      return out;
    }
  }
}

// `metric{tag:value,tag2:value}` -> [name, {tag: value}]
function parseSelector(key) {
  const m = /^([a-zA-Z_][a-zA-Z0-9_]*)(?:\{(.*)\})?$/.exec(key.trim());
  if (!m) throw new Error(`bad threshold/submetric key ${key}`);
  const sel = {};
  if (m[2]) {
    for (const part of m[2].split(',')) {
      const i = part.indexOf(':');
      if (i < 0) throw new Error(`bad submetric selector in ${key}`);
      sel[part.slice(0, i).trim()] = part.slice(i + 1).trim().replace(/^"(.*)"$/, '$1');
    }
  }
  return [m[1], sel];
}

function evalThreshold(expr, vals) {
  const src = typeof expr === 'string' ? expr : expr.threshold;
  const m = /^\s*(avg|min|max|med|count|rate|value|p\(\d+(?:\.\d+)?\))\s*(<=|>=|==|===|!=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$/.exec(src);
  if (!m) throw new Error(`unsupported threshold expression ${src}`);
  const v = m[1].startsWith('p(') || ['avg', 'min', 'max', 'med'].includes(m[1]) ? vals[m[1]] : vals[m[1]];
  if (v === undefined) throw new Error(`threshold ${src}: no ${m[1]} for this metric`);
  const x = Number(m[3]);
  return { '<': v < x, '<=': v <= x, '>': v > x, '>=': v >= x, '==': v === x, '===': v === x, '!=': v !== x }[m[2]];
}

function buildSummary(st, trendStats, durationMs) {
  const byMetric = new Map();
  for (const s of st.samples) {
    if (!byMetric.has(s.metric)) byMetric.set(s.metric, []);
    byMetric.get(s.metric).push(s);
  }
  const durationS = durationMs / 1000;
  const metrics = {};
  for (const [name, metric] of st.metrics) {
    const samples = byMetric.get(name) || [];
    if (!samples.length) continue;
    metrics[name] = { type: metric.type, contains: metric.contains, values: values(metric, samples, trendStats, durationS) };
  }
  let thresholdsFailed = false;
  const stats = trendStats.includes('p(99)') ? trendStats : trendStats;
  for (const [key, exprs] of Object.entries(st.options.thresholds || {})) {
    const [name, sel] = parseSelector(key);
    const metric = st.metrics.get(name);
    if (!metric) continue;
    const samples = (byMetric.get(name) || []).filter((s) => Object.entries(sel).every(([k, v]) => s.tags[k] === v));
    const allStats = [...new Set([...stats, 'avg', 'min', 'max', 'med', 'p(90)', 'p(95)', 'p(99)', 'count'])];
    const vals = values(metric, samples, allStats, durationS);
    const entry = metrics[key] || { type: metric.type, contains: metric.contains, values: values(metric, samples, trendStats, durationS) };
    entry.thresholds = {};
    for (const e of exprs || []) {
      const src = typeof e === 'string' ? e : e.threshold;
      const ok = samples.length === 0 ? true : evalThreshold(e, vals);
      entry.thresholds[src] = { ok };
      if (!ok) thresholdsFailed = true;
    }
    metrics[key] = entry;
  }
  const checks = [...st.checks.entries()].map(([name, c]) => ({ name, path: `::${name}`, id: name, passes: c.passes, fails: c.fails }));
  return {
    data: {
      root_group: { name: '', path: '', id: 'd41d8cd98f00b204e9800998ecf8427e', groups: [], checks },
      options: { summaryTrendStats: trendStats, summaryTimeUnit: '', noColor: false },
      state: { isStdOutTTY: false, isStdErrTTY: false, testRunDurationMs: durationMs },
      metrics,
    },
    thresholdsFailed,
  };
}

function textSummary(data) {
  const lines = [];
  for (const name of Object.keys(data.metrics).sort()) {
    const m = data.metrics[name];
    const v = Object.entries(m.values).map(([k, x]) => `${k}=${Number.isInteger(x) ? x : x.toFixed(3)}`).join(' ');
    lines.push(`  ${name.padEnd(40)} ${v}`);
  }
  for (const c of data.root_group.checks) {
    lines.push(`  ${c.fails ? '✗' : '✓'} ${c.name}: ${c.passes} passed, ${c.fails} failed`);
  }
  return `${lines.join('\n')}\n`;
}

module.exports = { CSV_HEADER, csvWriter, buildSummary, textSummary, percentile, parseSelector };
