'use strict';
// k6/net/grpc: Client (load, connect, invoke, close), Stream (on, write, end), status constants.
// The calls run in the I/O worker through the synchronous bridge; the samples k6 would emit
// (grpc_req_duration, grpc_streams*) are emitted here with k6's system tags.

const path = require('node:path');
const fs = require('node:fs');
const protoLoader = require('@grpc/proto-loader');
const bridge = require('./bridge');
const rt = require('./runtime');

const StatusCodes = {
  StatusOK: 0, StatusCanceled: 1, StatusUnknown: 2, StatusInvalidArgument: 3,
  StatusDeadlineExceeded: 4, StatusNotFound: 5, StatusAlreadyExists: 6,
  StatusPermissionDenied: 7, StatusResourceExhausted: 8, StatusFailedPrecondition: 9,
  StatusAborted: 10, StatusOutOfRange: 11, StatusUnimplemented: 12, StatusInternal: 13,
  StatusUnavailable: 14, StatusDataLoss: 15, StatusUnauthenticated: 16,
};

function parseDurationMs(v, dflt) {
  if (v === undefined || v === null) return dflt;
  if (typeof v === 'number') return v; // k6: a number is milliseconds
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(String(v).trim());
  if (!m) throw new Error(`invalid duration ${JSON.stringify(v)}`);
  const n = Number(m[1]);
  return n * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2] || 's'];
}

function normalizeMethod(method) {
  if (!method) throw new Error('method to invoke cannot be empty');
  return method[0] === '/' ? method : `/${method}`;
}

function callParams(params, allowed) {
  const out = { metadata: {}, tags: {}, timeoutMs: 60000 };
  if (params === undefined || params === null) return out;
  for (const [k, v] of Object.entries(params)) {
    if (!allowed.includes(k)) throw new Error(`unknown param: ${JSON.stringify(k)}`);
    if (k === 'metadata') {
      if (typeof v !== 'object') throw new Error('metadata must be an object with key-value pairs');
      for (const [mk, mv] of Object.entries(v)) {
        if (typeof mv !== 'string') throw new Error(`metadata ${JSON.stringify(mk)} value must be a string`);
        out.metadata[mk] = mv;
      }
    } else if (k === 'tags') {
      out.tags = rt.userTags(v);
    } else if (k === 'timeout') {
      out.timeoutMs = parseDurationMs(v, 60000);
    } else if (k === 'discardResponseMessage') {
      out.discard = !!v;
    }
  }
  return out;
}

// k6 sets url, service, method and name (unless the user set name) on every gRPC sample.
function grpcTags(addr, method, userTags) {
  const [service, short] = method.slice(1).split('/');
  const t = { ...rt.contextTags(), ...userTags, url: `${addr}${method}`, service, method: short };
  if (!('name' in userTags)) t.name = method;
  return t;
}

let nextClientId = 1;
let nextStreamId = 1;
const streamsById = new Map();

bridge.onEvent((ev) => {
  const s = streamsById.get(ev.id);
  if (s) s._event(ev);
});

class Client {
  constructor() {
    this._id = nextClientId++;
    this._loaded = [];
    this._methods = new Map();
    this._addr = null;
  }

  load(importPaths, ...files) {
    if (rt.state.phase !== 'init') throw new Error('load must be called in the init context');
    const dirs = (importPaths && importPaths.length ? importPaths : ['.'])
      .map((p) => path.resolve(rt.state.scriptDir, p));
    const resolved = files.map((f) => {
      const hit = dirs.find((d) => fs.existsSync(path.join(d, f)));
      if (!hit) throw new Error(`open ${f}: no such file in import paths ${dirs.join(', ')}`);
      return f;
    });
    const pkg = protoLoader.loadSync(resolved, { keepCase: false, includeDirs: dirs });
    const infos = [];
    for (const [svcName, def] of Object.entries(pkg)) {
      if (!def || def.format) continue;
      for (const [name, m] of Object.entries(def)) {
        if (!m || typeof m.path !== 'string') continue;
        this._methods.set(m.path, { requestStream: !!m.requestStream, responseStream: !!m.responseStream });
        infos.push({ package: svcName.split('.').slice(0, -1).join('.'), service: svcName.split('.').pop(),
          fullMethod: m.path, name, isClientStream: !!m.requestStream, isServerStream: !!m.responseStream });
      }
    }
    this._loaded.push({ importPaths: dirs, files: resolved });
    return infos;
  }

  connect(addr, params) {
    rt.mustRun('connecting to a gRPC server');
    const p = params || {};
    for (const k of Object.keys(p)) {
      if (!['plaintext', 'reflect', 'timeout', 'maxReceiveSize', 'maxSendSize', 'tls', 'reflectMetadata',
        'connectionSharing'].includes(k)) throw new Error(`invalid grpc.connect() parameters: unknown connect param: ${JSON.stringify(k)}`);
    }
    if (p.reflect !== undefined && typeof p.reflect !== 'boolean') throw new Error(`invalid reflect value: '${p.reflect}', it needs to be boolean`);
    if (p.plaintext !== undefined && typeof p.plaintext !== 'boolean') throw new Error(`invalid plaintext value: '${p.plaintext}', it needs to be boolean`);
    const timeoutMs = parseDurationMs(p.timeout, 60000);
    const res = bridge.call('grpcConnect', { id: this._id, target: addr, plaintext: !!p.plaintext,
      reflect: !!p.reflect, timeoutMs, loaded: this._loaded }, timeoutMs + 5000);
    for (const m of res.methods) this._methods.set(m.path, m);
    this._addr = addr;
    return true;
  }

  invoke(method, request, params) {
    rt.mustRun('invoking RPC methods');
    if (!this._addr) throw new Error('no gRPC connection, you must call connect first');
    method = normalizeMethod(method);
    const info = this._methods.get(method);
    if (!info) throw new Error(`method "${method}" not found in file descriptors`);
    const p = callParams(params, ['metadata', 'tags', 'timeout', 'headers']);
    if (request === null || request === undefined) throw new Error('request cannot be nil');
    const res = bridge.call('grpcInvoke', { id: this._id, method, message: JSON.parse(JSON.stringify(request)),
      metadata: p.metadata, timeoutMs: p.timeoutMs }, p.timeoutMs + 5000);
    const tags = grpcTags(this._addr, method, p.tags);
    tags.status = String(res.status);
    rt.push(rt.builtin('grpc_req_duration'), res.durationMs, tags, res.started + res.durationMs);
    return { status: res.status, message: res.message, headers: res.headers, trailers: res.trailers,
      error: res.error };
  }

  close() {
    if (this._addr) bridge.call('grpcClose', { id: this._id });
    this._addr = null;
  }

  // k6 API, rarely needed here
  healthCheck(service) {
    return this.invoke('/grpc.health.v1.Health/Check', { service: service || '' });
  }
}

class Stream {
  constructor(client, method, params) {
    rt.mustRun('creating a stream');
    if (!(client instanceof Client)) throw new Error('first argument must be a grpc.Client');
    if (!client._addr) throw new Error('no gRPC connection, you must call connect first');
    method = normalizeMethod(method);
    const info = client._methods.get(method);
    if (!info) throw new Error(`method "${method}" not found in file descriptors`);
    if (!info.requestStream && !info.responseStream) throw new Error(`method "${method}" is not a streaming method`);
    const p = callParams(params, ['metadata', 'tags', 'timeout', 'discardResponseMessage']);
    this._id = nextStreamId++;
    this._vu = rt.state.vu;
    this._client = client;
    this._method = method;
    this._tags = grpcTags(client._addr, method, p.tags);
    this._listeners = { data: [], error: [], end: [] };
    this._writing = true;
    this._closed = false;
    streamsById.set(this._id, this);
    rt.vuHold(this._vu);
    bridge.hold(true);
    openStreams++;
    bridge.call('streamOpen', { clientId: client._id, id: this._id, method, metadata: p.metadata,
      timeoutMs: p.timeout !== undefined ? p.timeoutMs : 0 });
    rt.push(rt.builtin('grpc_streams'), 1, { ...this._tags });
  }

  on(event, handler) {
    if (typeof handler !== 'function') throw new Error(`handler for "${event}" event isn't a callable function`);
    if (!this._listeners[event]) {
      process.stderr.write(`k6-shim: WARN can't register ${event} event handler: unknown event\n`);
      return;
    }
    this._listeners[event].push(handler);
  }

  write(message) {
    if (!this._writing) return;
    if (message === null || message === undefined) {
      process.stderr.write("k6-shim: WARN can't send empty message\n");
      return;
    }
    bridge.post('streamWrite', { id: this._id, message: JSON.parse(JSON.stringify(message)) });
    rt.push(rt.builtin('grpc_streams_msgs_sent'), 1, { ...this._tags });
  }

  end() {
    if (!this._writing) return;
    this._writing = false;
    bridge.post('streamEnd', { id: this._id });
  }

  _emit(event, arg) {
    const meta = { ts: Math.floor(Date.now() / 1000) };
    for (const fn of this._listeners[event]) rt.asVU(this._vu, () => fn(arg, meta), `stream ${event} handler`);
  }

  _event(ev) {
    if (this._closed) return;
    if (ev.ev === 'data') {
      rt.push(rt.builtin('grpc_streams_msgs_received'), 1, { ...this._tags });
      this._emit('data', ev.data);
    } else if (ev.ev === 'status' || ev.ev === 'opError') {
      this._closed = true;
      this._writing = false;
      streamsById.delete(this._id);
      const code = ev.ev === 'opError' ? 2 : ev.code;
      if (code !== 0 && code !== 1) {
        this._emit('error', { code, details: [], message: ev.details || ev.error || '' });
      }
      this._emit('end');
      openStreams--;
      if (openStreams === 0) bridge.hold(false);
      rt.vuRelease(this._vu);
    }
  }
}

let openStreams = 0;

module.exports = { Client, Stream, StatusCodes };
