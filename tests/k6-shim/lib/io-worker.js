'use strict';
// The I/O side of the shim, in a worker thread. k6's gRPC and HTTP calls are synchronous for a
// script, and Node's clients are asynchronous: the main thread posts a request and blocks on
// Atomics.wait; this worker runs the call on its own event loop, posts the result and wakes it
// (see bridge.js). Stream events travel the other way on a second port, asynchronously, and are
// delivered when the script's thread is idle, as k6 delivers them on its VU event loop.

const { workerData } = require('node:worker_threads');
const fs = require('node:fs');
const path = require('node:path');
const http = require('node:http');
const https = require('node:https');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const descriptor = require('protobufjs/ext/descriptor');

const flag = new Int32Array(workerData.sab);
const reqPort = workerData.reqPort;
const evPort = workerData.evPort;

// proto-loader options that give what k6's protojson gives: lowerCamelCase field names, every
// field present (EmitUnpopulated), 64-bit integers and enums as strings.
const LOADER_OPTS = { keepCase: false, longs: String, enums: String, defaults: true, oneofs: true };
const GRPC_PROTO_DIR = process.env.K6_SHIM_GRPC_PROTO_DIR || '/usr/share/grpc-proto';

const clients = new Map(); // client id -> { client, target, methods: Map(path -> def) }
const streams = new Map(); // stream id -> { call, def, pending, started }

function methodTable(packageDefinition) {
  const out = new Map();
  for (const [name, def] of Object.entries(packageDefinition)) {
    if (!def || typeof def !== 'object' || def.format) continue; // message/enum types
    for (const m of Object.values(def)) {
      if (m && typeof m === 'object' && typeof m.path === 'string' && m.requestSerialize) {
        out.set(m.path, m);
      }
    }
    void name;
  }
  return out;
}

function publicMethods(table) {
  return [...table.values()].map((m) => ({
    path: m.path, requestStream: !!m.requestStream, responseStream: !!m.responseStream,
  }));
}

function mdToObject(md) {
  // k6 gives headers and trailers as map[string][]string.
  const out = {};
  if (!md) return out;
  for (const [k, v] of Object.entries(md.getMap ? md.toJSON() : md)) {
    out[k] = (Array.isArray(v) ? v : [v]).map((x) => (Buffer.isBuffer(x) ? x.toString('latin1') : String(x)));
  }
  return out;
}

function objectToMd(obj) {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(obj || {})) {
    if (typeof v !== 'string') throw new Error(`metadata ${JSON.stringify(k)} value must be a string`);
    md.add(k, v);
  }
  return md;
}

function deadlineIn(ms) {
  return new Date(Date.now() + ms);
}

// ---------------------------------------------------------------------------------------------
// reflection: grpc.reflection.v1 (then v1alpha) ServerReflectionInfo

function reflectionDefs(version) {
  const file = path.join(GRPC_PROTO_DIR, 'grpc', 'reflection', version, 'reflection.proto');
  if (!fs.existsSync(file)) {
    throw new Error(`reflection needs ${file} (Debian package grpc-proto)`);
  }
  const pkg = protoLoader.loadSync(file, { keepCase: true, longs: String, enums: String,
    defaults: false, oneofs: true, includeDirs: [GRPC_PROTO_DIR] });
  const svc = pkg[`grpc.reflection.${version}.ServerReflection`];
  return svc.ServerReflectionInfo;
}

function reflectOnce(client, version, timeoutMs) {
  const def = reflectionDefs(version);
  return new Promise((resolve, reject) => {
    const call = client.makeBidiStreamRequest(def.path, def.requestSerialize,
      def.responseDeserialize, new grpc.Metadata(), { deadline: deadlineIn(timeoutMs) });
    const files = new Map(); // name -> bytes
    const waiting = [];
    let outstanding = 0;
    let failed = null;
    const send = (req) => { outstanding++; call.write(req); };
    const addFiles = (list) => {
      for (const bytes of list || []) {
        const fd = descriptor.FileDescriptorProto.decode(bytes);
        if (files.has(fd.name)) continue;
        files.set(fd.name, Buffer.from(bytes));
        for (const dep of fd.dependency || []) {
          if (!files.has(dep) && !waiting.includes(dep)) {
            waiting.push(dep);
            send({ file_by_filename: dep });
          }
        }
      }
    };
    call.on('data', (resp) => {
      outstanding--;
      if (resp.error_response) {
        failed = new Error(`reflection: ${resp.error_response.error_message} (code ${resp.error_response.error_code})`);
      } else if (resp.list_services_response) {
        for (const s of resp.list_services_response.service || []) {
          if (s.name.startsWith('grpc.reflection.')) continue;
          send({ file_containing_symbol: s.name });
        }
      } else if (resp.file_descriptor_response) {
        addFiles(resp.file_descriptor_response.file_descriptor_proto);
      }
      if (outstanding === 0) call.end();
    });
    call.on('error', (e) => reject(e));
    call.on('status', (st) => {
      if (st.code !== grpc.status.OK) return; // 'error' reports it
      if (failed) return reject(failed);
      const set = Buffer.concat([...files.values()].map((b) => {
        // FileDescriptorSet { repeated FileDescriptorProto file = 1; }: tag 0x0a, length, bytes
        const len = [];
        let n = b.length;
        do { let x = n & 0x7f; n >>>= 7; if (n) x |= 0x80; len.push(x); } while (n);
        return Buffer.concat([Buffer.from([0x0a, ...len]), b]);
      }));
      resolve(set);
    });
    send({ host: '', list_services: '' });
  });
}

async function reflect(client, timeoutMs) {
  try {
    return await reflectOnce(client, 'v1', timeoutMs);
  } catch (e) {
    if (e && e.code === grpc.status.UNIMPLEMENTED) return reflectOnce(client, 'v1alpha', timeoutMs);
    throw e;
  }
}

// ---------------------------------------------------------------------------------------------
// operations (each returns a value or throws; sync ones are answered through the bridge)

const ops = {
  async grpcConnect({ id, target, plaintext, reflect: doReflect, timeoutMs, loaded }) {
    if (!plaintext) throw new Error('the shim only speaks plaintext (connect with { plaintext: true })');
    const old = clients.get(id);
    if (old) old.client.close();
    const client = new grpc.Client(target, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': 64 << 20, 'grpc.max_send_message_length': 64 << 20,
    });
    await new Promise((resolve, reject) => client.waitForReady(deadlineIn(timeoutMs),
      (e) => (e ? reject(new Error(`connect ${target}: ${e.message}`)) : resolve())));
    const methods = new Map();
    for (const spec of loaded || []) {
      const pkg = protoLoader.loadSync(spec.files, { ...LOADER_OPTS, includeDirs: spec.importPaths });
      for (const [k, v] of methodTable(pkg)) methods.set(k, v);
    }
    if (doReflect) {
      const set = await reflect(client, timeoutMs);
      const pkg = protoLoader.loadFileDescriptorSetFromBuffer(set, LOADER_OPTS);
      for (const [k, v] of methodTable(pkg)) methods.set(k, v);
    }
    clients.set(id, { client, target, methods });
    return { methods: publicMethods(methods) };
  },

  grpcClose({ id }) {
    const c = clients.get(id);
    if (c) { c.client.close(); clients.delete(id); }
    return true;
  },

  grpcInvoke({ id, method, message, metadata, timeoutMs }) {
    const c = clients.get(id);
    if (!c) throw new Error('no gRPC connection, you must call connect first');
    const def = c.methods.get(method);
    if (!def) throw new Error(`method "${method}" not found in file descriptors`);
    if (def.requestStream || def.responseStream) throw new Error(`method "${method}" is a streaming method: use grpc.Stream`);
    const md = objectToMd(metadata);
    const started = Date.now();
    const t0 = process.hrtime.bigint();
    return new Promise((resolve) => {
      let headers = {};
      let response = null;
      const call = c.client.makeUnaryRequest(def.path, def.requestSerialize, def.responseDeserialize,
        message, md, { deadline: deadlineIn(timeoutMs) }, (err, value) => { if (!err) response = value; });
      call.on('metadata', (m) => { headers = mdToObject(m); });
      call.on('status', (st) => {
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        const res = { status: st.code, message: st.code === 0 ? response : null, headers,
          trailers: mdToObject(st.metadata), error: null, durationMs: ms, started };
        if (st.code !== 0) res.error = { code: st.code, details: [], message: st.details };
        resolve(res);
      });
    });
  },

  streamOpen({ clientId, id, method, metadata, timeoutMs }) {
    const c = clients.get(clientId);
    if (!c) throw new Error('no gRPC connection, you must call connect first');
    const def = c.methods.get(method);
    if (!def) throw new Error(`method "${method}" not found in file descriptors`);
    if (!def.requestStream && !def.responseStream) throw new Error(`method "${method}" is not a streaming method`);
    const st = { def, clientId, md: objectToMd(metadata), opts: timeoutMs ? { deadline: deadlineIn(timeoutMs) } : {},
      call: null, pending: [], ended: false };
    streams.set(id, st);
    if (def.requestStream) startStream(id, st, null);
    return true;
  },

  // fire-and-forget (no reply)
  streamWrite({ id, message }) {
    const st = streams.get(id);
    if (!st) return;
    if (!st.call) { startStream(id, st, message); return; } // server streaming: the one request
    if (st.def.requestStream) st.call.write(message);
  },

  streamEnd({ id }) {
    const st = streams.get(id);
    if (!st || st.ended) return;
    st.ended = true;
    if (st.call && st.def.requestStream) st.call.end();
  },

  async httpRequest({ method, url, body, headers, timeoutMs }) {
    const u = new URL(url);
    const mod = u.protocol === 'https:' ? https : http;
    const started = Date.now();
    const t0 = process.hrtime.bigint();
    return new Promise((resolve) => {
      const req = mod.request(u, { method, headers: headers || {}, agent: u.protocol === 'https:' ? httpsAgent : httpAgent, timeout: timeoutMs }, (res) => {
        const chunks = [];
        let tFirst = null;
        res.on('data', (d) => { if (tFirst === null) tFirst = process.hrtime.bigint(); chunks.push(d); });
        res.on('end', () => {
          const tEnd = process.hrtime.bigint();
          const first = tFirst === null ? tEnd : tFirst;
          const hdrs = {};
          for (let i = 0; i < res.rawHeaders.length; i += 2) {
            hdrs[canonical(res.rawHeaders[i])] = res.rawHeaders[i + 1];
          }
          resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8'), headers: hdrs,
            proto: `HTTP/${res.httpVersion}`, error: '', error_code: 0, started,
            timings: { duration: Number(tEnd - t0) / 1e6, waiting: Number(first - t0) / 1e6,
              receiving: Number(tEnd - first) / 1e6, sending: 0, blocked: 0, connecting: 0, tls_handshaking: 0 } });
        });
      });
      req.on('timeout', () => req.destroy(new Error('request timeout')));
      req.on('error', (e) => {
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        resolve({ status: 0, body: null, headers: {}, proto: '', error: e.message, error_code: 1000, started,
          timings: { duration: ms, waiting: 0, receiving: 0, sending: 0, blocked: 0, connecting: 0, tls_handshaking: 0 } });
      });
      if (body !== null && body !== undefined) req.write(body);
      req.end();
    });
  },

  ping() {
    return true;
  },

  shutdown() {
    for (const c of clients.values()) c.client.close();
    return true;
  },
};

const httpAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 1 });

function canonical(name) {
  return name.split('-').map((p) => p.charAt(0).toUpperCase() + p.slice(1).toLowerCase()).join('-');
}

function startStream(id, st, firstMessage) {
  const c = clients.get(st.clientId);
  const { def } = st;
  let call;
  if (def.requestStream && def.responseStream) {
    call = c.client.makeBidiStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, st.md, st.opts);
  } else if (def.requestStream) {
    call = c.client.makeClientStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, st.md, st.opts,
      (err, value) => { if (!err) evPort.postMessage({ id, ev: 'data', data: value }); });
  } else {
    call = c.client.makeServerStreamRequest(def.path, def.requestSerialize, def.responseDeserialize, firstMessage, st.md, st.opts);
  }
  st.call = call;
  if (def.responseStream) call.on('data', (m) => evPort.postMessage({ id, ev: 'data', data: m }));
  call.on('metadata', (m) => evPort.postMessage({ id, ev: 'headers', headers: mdToObject(m) }));
  call.on('error', () => {}); // reported with the status below
  call.on('status', (s) => {
    streams.delete(id);
    evPort.postMessage({ id, ev: 'status', code: s.code, details: s.details, trailers: mdToObject(s.metadata) });
  });
}

reqPort.on('message', async (m) => {
  let reply;
  try {
    const fn = ops[m.op];
    if (!fn) throw new Error(`shim: unknown operation ${m.op}`);
    const value = await fn(m.args || {});
    reply = { ok: true, value };
  } catch (e) {
    reply = { ok: false, error: e && e.message ? e.message : String(e), code: e && e.code };
  }
  if (m.sync) {
    reqPort.postMessage(reply);
    Atomics.store(flag, 0, 1);
    Atomics.notify(flag, 0);
  } else if (!reply.ok) {
    evPort.postMessage({ id: m.args && m.args.id, ev: 'opError', error: reply.error });
  }
});
