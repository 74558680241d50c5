// One echod process on free loopback ports, for the Node tests (test_grpcjs.js,
// test_reflection.js). Needs nothing from node_modules.
//
//   const { Daemon, SLOW } = require('./daemon');
//   const d = await new Daemon('grpcjs').start();   // d.target, d.metric(name, labels)
//   await d.stop();                                   // throws on a bad exit or a sanitizer report
//
// Environment: ECHOD_BIN (default <root>/build/daemon/echod), ECHOD_SOURCE_ROOT, ECHOD_SANITIZER
// (time limits grow 4x).
'use strict';

const { spawn } = require('child_process');
const fs = require('fs');
const http = require('http');
const net = require('net');
const os = require('os');
const path = require('path');

const ROOT = process.env.ECHOD_SOURCE_ROOT || path.resolve(__dirname, '..', '..');
const ECHOD_BIN = process.env.ECHOD_BIN || path.join(ROOT, 'build', 'daemon', 'echod');
const SLOW = process.env.ECHOD_SANITIZER ? 4 : 1;

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function httpGet(port, urlPath) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: urlPath, timeout: 2000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

function tcpConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Daemon {
  // name: for the log file, echod-NAME-PID.log in the temporary directory; args: more echod
  // arguments (e.g. ['--config', 'config/arms/fixed.yaml'])
  constructor(name, args = []) {
    this.name = name;
    this.args = args;
  }

  async start() {
    this.grpcPort = await freePort();
    this.adminPort = await freePort();
    this.logPath = path.join(os.tmpdir(), `echod-${this.name}-${process.pid}.log`);
    const log = fs.openSync(this.logPath, 'w');
    this.proc = spawn(ECHOD_BIN, [
      ...this.args,
      '--set', `listen.grpc=127.0.0.1:${this.grpcPort}`,
      '--set', `listen.admin=127.0.0.1:${this.adminPort}`,
    ], { cwd: ROOT, stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.exited = null;
    this.proc.on('exit', (code, signal) => { this.exited = { code, signal }; });
    const until = Date.now() + 20000 * SLOW;
    while (Date.now() < until) {
      if (this.exited) throw new Error(`echod exited early: ${JSON.stringify(this.exited)}\n${this.log()}`);
      try {
        const r = await httpGet(this.adminPort, '/readyz'); // 200 once every thread runs
        if (r.status === 200 && await tcpConnect(this.grpcPort)) return this;
      } catch (e) { /* not up yet */ }
      await sleep(20);
    }
    throw new Error(`echod not ready\n${this.log()}`);
  }

  get target() {
    return `127.0.0.1:${this.grpcPort}`;
  }

  log() {
    try { return fs.readFileSync(this.logPath, 'utf8'); } catch (e) { return ''; }
  }

  async stop() {
    if (!this.exited) {
      this.proc.kill('SIGTERM');
      const until = Date.now() + 30000 * SLOW;
      while (!this.exited && Date.now() < until) await sleep(20);
      if (!this.exited) {
        this.proc.kill('SIGKILL');
        throw new Error(`echod did not exit after SIGTERM\n${this.log()}`);
      }
    }
    const text = this.log();
    if (this.exited.code !== 0 || /Sanitizer|runtime error:/.test(text)) {
      throw new Error(`echod exited with ${JSON.stringify(this.exited)}\n${text}`);
    }
  }

  // The sum of a metric's samples whose labels include `labels`.
  async metric(name, labels) {
    const r = await httpGet(this.adminPort, '/metrics');
    let sum = 0;
    for (const line of r.body.split('\n')) {
      if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
      if (labels && !Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
      sum += Number(line.trim().split(/\s+/).pop());
    }
    return sum;
  }
}

module.exports = { Daemon, ROOT, SLOW, sleep };
