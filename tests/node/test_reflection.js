// A client that knows nothing but server reflection: grpc-js-reflection-client lists echod's
// services, fetches their descriptors (v1 and v1alpha), builds @grpc/grpc-js clients from
// them and calls UnaryEcho, Health/Check and BenchmarkService/UnaryCall. No .proto file is read.
//
//   ECHOD_BIN=build/daemon/echod node tests/node/test_reflection.js
//
// Exit 77 (meson: skipped) when node_modules lacks the packages (run `npm ci` in tests/node).
'use strict';

const fs = require('fs');
const path = require('path');

const here = __dirname;
for (const pkg of [['@grpc', 'grpc-js'], ['grpc-js-reflection-client']]) {
  if (!fs.existsSync(path.join(here, 'node_modules', ...pkg))) {
    console.log(`tests/node/node_modules has no ${pkg.join('/')}: run \`npm ci\` in tests/node; skipping`);
    process.exit(77);
  }
}

const grpc = require('@grpc/grpc-js');
const { GrpcReflection } = require('grpc-js-reflection-client');
const { Daemon, SLOW } = require('./daemon');

const SERVED = [
  'grpc.examples.echo.Echo',
  'grpc.health.v1.Health',
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
  'grpc.testing.BenchmarkService',
];

function deadline(seconds) {
  return new Date(Date.now() + seconds * 1000 * SLOW);
}

function assertEqual(a, b, what) {
  const ja = JSON.stringify(a);
  const jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${what || 'value'}: got ${ja.slice(0, 300)}, want ${jb.slice(0, 300)}`);
}

function unary(client, method, req) {
  return new Promise((resolve, reject) => {
    client[method](req, { deadline: deadline(30) }, (err, r) => (err ? reject(err) : resolve(r)));
  });
}

// Walks a grpc-js package object ("grpc.examples.echo.Echo") to the service constructor.
function lookup(pkg, name) {
  const ctor = name.split('.').reduce((o, k) => (o ? o[k] : undefined), pkg);
  if (typeof ctor !== 'function') throw new Error(`${name} is not in the descriptor's package object`);
  return ctor;
}

const LOADER = { keepCase: true, longs: String, enums: String, defaults: true };

const tests = [];
function test(name, fn) { tests.push({ name, fn }); }

for (const version of ['v1', 'v1alpha']) {
  test(`${version}: list services`, async ({ daemon }) => {
    const r = new GrpcReflection(daemon.target, grpc.credentials.createInsecure(), {}, version);
    assertEqual((await r.listServices()).slice().sort(), SERVED, 'services');
  });

  test(`${version}: list methods of Echo`, async ({ daemon }) => {
    const r = new GrpcReflection(daemon.target, grpc.credentials.createInsecure(), {}, version);
    const methods = (await r.listMethods('grpc.examples.echo.Echo')).map((m) => m.name).sort();
    assertEqual(methods, ['BidirectionalStreamingEcho', 'ClientStreamingEcho', 'ServerStreamingEcho', 'UnaryEcho'],
      'methods');
  });

  test(`${version}: discover Echo and call UnaryEcho`, async ({ daemon }) => {
    const r = new GrpcReflection(daemon.target, grpc.credentials.createInsecure(), {}, version);
    const descriptor = await r.getDescriptorBySymbol('grpc.examples.echo.Echo');
    const Echo = lookup(descriptor.getPackageObject(LOADER), 'grpc.examples.echo.Echo');
    const client = new Echo(daemon.target, grpc.credentials.createInsecure());
    try {
      const resp = await unary(client, 'UnaryEcho', { message: `found by ${version} reflection` });
      assertEqual(resp.message, `found by ${version} reflection`, 'UnaryEcho');
    } finally {
      client.close();
    }
  });

  // grpc-js-reflection-client's getPackageObject() re-encodes the set through protobufjs, which
  // trips over messages.proto's map fields ("duplicate name 'RpcsByPeer'"; protoc's own bytes
  // load fine with proto-loader). So this one calls through the protobufjs types it resolved.
  test(`${version}: BenchmarkService with its imported messages`, async ({ daemon }) => {
    const r = new GrpcReflection(daemon.target, grpc.credentials.createInsecure(), {}, version);
    const root = (await r.getDescriptorBySymbol('grpc.testing.BenchmarkService.UnaryCall')).getProtobufJsRoot();
    const svc = root.lookupService('grpc.testing.BenchmarkService');
    const method = svc.methods.UnaryCall.resolve();
    const Req = method.resolvedRequestType; // grpc.testing.SimpleRequest, from messages.proto
    const Resp = method.resolvedResponseType;
    const client = new grpc.Client(daemon.target, grpc.credentials.createInsecure());
    try {
      const resp = await new Promise((resolve, reject) => {
        client.makeUnaryRequest(`/${svc.fullName.replace(/^\./, '')}/${method.name}`,
          (o) => Buffer.from(Req.encode(Req.fromObject(o)).finish()), (b) => Resp.decode(b),
          { responseSize: 1000 }, { deadline: deadline(30) }, (err, x) => (err ? reject(err) : resolve(x)));
      });
      assertEqual(resp.payload.body.length, 1000, 'payload size');
    } finally {
      client.close();
    }
  });

  test(`${version}: Health by file name`, async ({ daemon }) => {
    const r = new GrpcReflection(daemon.target, grpc.credentials.createInsecure(), {}, version);
    const descriptor = await r.getDescriptorByFileName('grpc/health/v1/health.proto');
    const Health = lookup(descriptor.getPackageObject(LOADER), 'grpc.health.v1.Health');
    const client = new Health(daemon.target, grpc.credentials.createInsecure());
    try {
      assertEqual((await unary(client, 'Check', { service: '' })).status, 'SERVING', 'status');
    } finally {
      client.close();
    }
  });

  test(`${version}: unknown symbol is an error`, async ({ daemon }) => {
    const r = new GrpcReflection(daemon.target, grpc.credentials.createInsecure(), {}, version);
    let failed = false;
    try {
      await r.getDescriptorBySymbol('no.such.Service');
    } catch (e) {
      failed = true;
    }
    if (!failed) throw new Error('an unknown symbol resolved');
  });
}

async function main() {
  let passed = 0;
  let failed = 0;
  let daemon;
  try {
    daemon = await new Daemon('reflection').start();
    for (const t of tests) {
      try {
        await t.fn({ daemon });
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
    if (daemon) {
      try {
        await daemon.stop();
      } catch (e) {
        failed++;
        console.log(`FAIL - shutdown: ${e.message}`);
      }
      if (failed) console.log(`---- echod log ----\n${daemon.log()}`);
      fs.rmSync(daemon.logPath, { force: true });
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main();
