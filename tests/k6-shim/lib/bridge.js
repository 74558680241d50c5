'use strict';
// Synchronous calls from the script's thread into the I/O worker (io-worker.js).
//
// call(op, args): posts {op, args, sync} on the request port and blocks in Atomics.wait until
// the worker has posted the reply and flipped the shared flag, then takes the reply with
// receiveMessageOnPort (no listener is attached to that port, so nothing else consumes it).
// post(op, args): fire and forget (stream writes), in order with the sync calls.
// Worker-to-script events (stream data, status) arrive on a second port with an ordinary
// listener, so they are delivered only while the script's thread is idle, as on a k6 VU.

const path = require('node:path');
const { Worker, MessageChannel, receiveMessageOnPort } = require('node:worker_threads');

let worker = null;
let flag = null;
let reqPort = null;
let evPort = null;
const listeners = new Set();

function start() {
  if (worker) return;
  const sab = new SharedArrayBuffer(4);
  flag = new Int32Array(sab);
  const req = new MessageChannel();
  const ev = new MessageChannel();
  worker = new Worker(path.join(__dirname, 'io-worker.js'), {
    workerData: { sab, reqPort: req.port2, evPort: ev.port2 },
    transferList: [req.port2, ev.port2],
  });
  worker.on('error', (e) => {
    process.stderr.write(`k6-shim: I/O worker failed: ${e && e.stack ? e.stack : e}\n`);
    process.exit(108);
  });
  reqPort = req.port1;
  evPort = ev.port1;
  evPort.on('message', (m) => { for (const fn of listeners) fn(m); });
  evPort.unref();
  worker.unref();
}

function call(op, args, timeoutMs = 120000) {
  start();
  Atomics.store(flag, 0, 0);
  reqPort.postMessage({ op, args, sync: true });
  const r = Atomics.wait(flag, 0, 0, timeoutMs);
  if (r === 'timed-out') throw new Error(`k6-shim: ${op} got no answer in ${timeoutMs} ms`);
  const m = receiveMessageOnPort(reqPort);
  if (!m) throw new Error(`k6-shim: ${op}: the worker woke us without a reply`);
  if (!m.message.ok) {
    const e = new Error(m.message.error);
    if (m.message.code !== undefined) e.code = m.message.code;
    throw e;
  }
  return m.message.value;
}

function post(op, args) {
  start();
  reqPort.postMessage({ op, args, sync: false });
}

function onEvent(fn) {
  start();
  listeners.add(fn);
}

// Keeps the process alive while streams are open (the event port is unref'd otherwise).
function hold(on) {
  if (!evPort) return;
  if (on) evPort.ref(); else evPort.unref();
}

async function stop() {
  if (!worker) return;
  try { call('shutdown', {}, 5000); } catch (_) { /* exiting anyway */ }
  await worker.terminate();
  worker = null;
}

module.exports = { call, post, onEvent, hold, stop };
