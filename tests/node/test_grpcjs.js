// echod against @grpc/grpc-js: unary and a 1000-message bidi stream, proto loaded at run time
// from proto/echo.proto with @grpc/proto-loader. Starts its own daemon on free ports.
//
//   ECHOD_BIN=build/daemon/echod node tests/node/test_grpcjs.js
//
// Exit 77 (meson: skipped) when node_modules is missing (run `npm ci` in tests/node first).
'use strict';

const fs = require('fs');
const path = require('path');

const here = __dirname;
if (!fs.existsSync(path.join(here, 'node_modules', '@grpc', 'grpc-js'))) {
  console.log('tests/node/node_modules missing: run `npm ci` in tests/node; skipping');
  process.exit(77);
}

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { Daemon, ROOT, SLOW, sleep } = require('./daemon');

function loadEcho() {
  const def = protoLoader.loadSync(path.join(ROOT, 'proto', 'echo.proto'), {
    keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
  });
  return grpc.loadPackageDefinition(def).grpc.examples.echo.Echo;
}

function deadline(seconds) {
  return new Date(Date.now() + seconds * 1000 * SLOW);
}

const tests = [];
function test(name, fn) { tests.push({ name, fn }); }

function assertEqual(a, b, what) {
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${what || 'value'}: got ${ja.slice(0, 300)}, want ${jb.slice(0, 300)}`);
}

test('unary', async ({ client }) => {
  const resp = await new Promise((resolve, reject) => {
    client.UnaryEcho({ message: 'hello from grpc-js' }, { deadline: deadline(30) },
      (err, r) => (err ? reject(err) : resolve(r)));
  });
  assertEqual(resp.message, 'hello from grpc-js', 'unary response');
});

test('unary 100 concurrent', async ({ client }) => {
  const calls = [];
  for (let i = 0; i < 100; i++) {
    calls.push(new Promise((resolve, reject) => {
      client.UnaryEcho({ message: `c${i}` }, { deadline: deadline(30) },
        (err, r) => (err ? reject(err) : resolve(r.message)));
    }));
  }
  const got = await Promise.all(calls);
  assertEqual(got, Array.from({ length: 100 }, (_, i) => `c${i}`), 'responses');
});

test('server streaming', async ({ client }) => {
  const got = await new Promise((resolve, reject) => {
    const out = [];
    const call = client.ServerStreamingEcho({ message: 'again' }, { deadline: deadline(30) });
    call.on('data', (r) => out.push(r.message));
    call.on('error', reject);
    call.on('end', () => resolve(out));
  });
  assertEqual(got, Array(10).fill('again'), 'server streaming');
});

test('client streaming', async ({ client }) => {
  const resp = await new Promise((resolve, reject) => {
    const call = client.ClientStreamingEcho({ deadline: deadline(30) },
      (err, r) => (err ? reject(err) : resolve(r)));
    for (const m of ['a', 'b', 'c']) call.write({ message: m });
    call.end();
  });
  assertEqual(resp.message, 'abc', 'client streaming');
});

test('bidi 1000 messages in order', async ({ client }) => {
  const want = Array.from({ length: 1000 }, (_, i) => `msg-${i}`);
  const got = await new Promise((resolve, reject) => {
    const out = [];
    const call = client.BidirectionalStreamingEcho({ deadline: deadline(60) });
    call.on('data', (r) => out.push(r.message));
    call.on('error', reject);
    call.on('status', (s) => { if (s.code !== grpc.status.OK) reject(new Error(`status ${s.code}`)); });
    call.on('end', () => resolve(out));
    for (const m of want) call.write({ message: m });
    call.end();
  });
  assertEqual(got.length, 1000, 'count');
  assertEqual(got, want, 'order');
});

test('unknown method is UNIMPLEMENTED', async ({ daemon }) => {
  const c = new grpc.Client(daemon.target, grpc.credentials.createInsecure());
  try {
    const err = await new Promise((resolve) => {
      c.makeUnaryRequest('/grpc.examples.echo.Echo/Nope', (x) => x, (x) => x, Buffer.alloc(0),
        { deadline: deadline(30) }, (e) => resolve(e));
    });
    if (!err) throw new Error('call succeeded');
    assertEqual(err.code, grpc.status.UNIMPLEMENTED, 'status');
  } finally {
    c.close();
  }
});

test('metrics count the calls', async ({ daemon }) => {
  const lbl = { grpc_method: 'UnaryEcho', grpc_code: 'OK' };
  const want = 101;
  const stop = Date.now() + 10000 * SLOW;
  let n = 0;
  while (Date.now() < stop) {
    n = await daemon.metric('grpc_server_handled_total', lbl);
    if (n >= want) break;
    await sleep(20);
  }
  assertEqual(n, want, 'grpc_server_handled_total{UnaryEcho,OK}');
  assertEqual(await daemon.metric('grpc_server_handled_total',
    { grpc_method: 'BidirectionalStreamingEcho', grpc_code: 'OK' }), 1, 'bidi handled');
});

// grpc-encoding: grpc-js compresses every message once grpc.default_compression_algorithm is set
// (1 deflate, 2 gzip) and keeps doing so while the server's grpc-accept-encoding lists it. Each
// arm in its own daemon: direct, a pool arm, the serializing wrapper.
async function compressedRound(Echo, target, name, algo) {
  const c = new Echo(target, grpc.credentials.createInsecure(), { 'grpc.default_compression_algorithm': algo });
  const big = `${name}-`.padEnd(3000, 'z');
  try {
    for (let i = 0; i < 2; i++) { // the second round runs after grpc-js saw grpc-accept-encoding
      const u = await new Promise((resolve, reject) => {
        c.UnaryEcho({ message: big }, { deadline: deadline(30) }, (e, r) => (e ? reject(e) : resolve(r)));
      });
      assertEqual(u.message, big, 'unary');
      const ss = await new Promise((resolve, reject) => {
        const out = [];
        const call = c.ServerStreamingEcho({ message: big }, { deadline: deadline(30) });
        call.on('data', (r) => out.push(r.message));
        call.on('error', reject);
        call.on('end', () => resolve(out));
      });
      assertEqual(ss, Array(10).fill(big), 'server streaming');
      const cs = await new Promise((resolve, reject) => {
        const call = c.ClientStreamingEcho({ deadline: deadline(30) }, (e, r) => (e ? reject(e) : resolve(r)));
        for (const m of [big, 'b', big]) call.write({ message: m });
        call.end();
      });
      assertEqual(cs.message, big + 'b' + big, 'client streaming');
      const want = Array.from({ length: 100 }, (_, k) => `${big}-${k}`);
      const bd = await new Promise((resolve, reject) => {
        const out = [];
        const call = c.BidirectionalStreamingEcho({ deadline: deadline(60) });
        call.on('data', (r) => out.push(r.message));
        call.on('error', reject);
        call.on('end', () => resolve(out));
        for (const m of want) call.write({ message: m });
        call.end();
      });
      assertEqual(bd, want, 'bidi');
    }
  } finally {
    c.close();
  }
}

for (const arm of ['direct', 'fixed', 'direct-serialized']) {
  test(`deflate and gzip on all four methods, arm ${arm}`, async () => {
    const d = await new Daemon(`grpcjs-${arm}`, ['--config', path.join(ROOT, 'config', 'arms', `${arm}.yaml`)]).start();
    try {
      const Echo = loadEcho();
      for (const [name, algo] of [['deflate', 1], ['gzip', 2]]) {
        await compressedRound(Echo, d.target, name, algo);
        // per round: 1 + 1 + 3 + 100 messages, all compressed
        assertEqual(await d.metric('echod_grpc_encoding_messages_total', { direction: 'received', encoding: name }),
          2 * 105, `echod_grpc_encoding_messages_total{received,${name}}`);
        // and answered in kind (respond: request): 1 + 10 + 1 + 100 responses per round
        assertEqual(await d.metric('echod_grpc_encoding_messages_total', { direction: 'sent', encoding: name }),
          2 * 112, `echod_grpc_encoding_messages_total{sent,${name}}`);
      }
    } finally {
      await d.stop();
      try { fs.unlinkSync(d.logPath); } catch (e) { /* gone */ }
    }
  });
}

async function main() {
  let passed = 0;
  let failed = 0;
  let daemon;
  let client;
  try {
    daemon = await new Daemon('grpcjs').start();
    const Echo = loadEcho();
    client = new Echo(daemon.target, grpc.credentials.createInsecure());
    for (const t of tests) {
      try {
        await t.fn({ client, daemon });
        passed++;
        console.log(`ok - ${t.name}`);
      } catch (e) {
        failed++;
        console.log(`FAIL - ${t.name}: ${e && e.stack ? e.stack : e}`);
      }
    }
  } catch (e) {
    failed++;
    console.log(`FAIL - setup: ${e && e.stack ? e.stack : e}`);
  } finally {
    if (client) client.close();
    if (daemon) {
      try {
        await daemon.stop();
      } catch (e) {
        failed++;
        console.log(`FAIL - shutdown: ${e.message}`);
      }
      if (failed) console.log(`---- echod log ----\n${daemon.log()}`);
      try { fs.unlinkSync(daemon.logPath); } catch (e) { /* gone */ }
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main();
