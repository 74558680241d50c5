'use strict';
// k6/http: request, get, post, put, del (synchronous, through the I/O worker), with k6's
// http_req_* samples and system tags (method, url, name, status, proto, expected_response).

const bridge = require('./bridge');
const rt = require('./runtime');

function parseTimeout(v) {
  if (v === undefined) return 60000;
  if (typeof v === 'number') return v;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(String(v));
  if (!m) throw new Error(`invalid timeout ${JSON.stringify(v)}`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60000 }[m[2] || 's'];
}

function encodeBody(body, headers) {
  if (body === null || body === undefined) return null;
  if (typeof body === 'string') return body;
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  if (typeof body === 'object') {
    // k6 form-encodes a plain object
    if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) {
      headers['Content-Type'] = 'application/x-www-form-urlencoded';
    }
    return new URLSearchParams(Object.entries(body).map(([k, v]) => [k, String(v)])).toString();
  }
  return String(body);
}

function request(method, url, body, params) {
  rt.mustRun('making HTTP requests');
  const p = params || {};
  for (const k of Object.keys(p)) {
    if (!['headers', 'tags', 'timeout', 'responseType', 'redirects', 'cookies', 'auth', 'compression',
      'jar', 'responseCallback'].includes(k)) {
      throw new Error(`unknown http param ${JSON.stringify(k)}`);
    }
  }
  const headers = { ...(p.headers || {}) };
  const payload = encodeBody(body, headers);
  const timeoutMs = parseTimeout(p.timeout);
  const res = bridge.call('httpRequest', { method, url: String(url), body: payload, headers, timeoutMs },
    timeoutMs + 5000);
  const userTags = rt.userTags(p.tags);
  const expected = res.status >= 200 && res.status < 400;
  const tags = { ...rt.contextTags(), ...userTags, method, url: String(url),
    name: userTags.name || String(url), status: String(res.status), proto: res.proto,
    expected_response: String(expected) };
  if (res.error) {
    tags.error = res.error;
    tags.error_code = String(res.error_code);
  }
  const when = res.started + res.timings.duration;
  rt.push(rt.builtin('http_reqs'), 1, tags, when);
  rt.push(rt.builtin('http_req_duration'), res.timings.duration, tags, when);
  for (const k of ['blocked', 'connecting', 'tls_handshaking', 'sending', 'waiting', 'receiving']) {
    rt.push(rt.builtin(`http_req_${k}`), res.timings[k], tags, when);
  }
  rt.push(rt.builtin('http_req_failed'), expected ? 0 : 1, tags, when);
  return {
    status: res.status,
    status_text: res.status ? `${res.status}` : '',
    body: p.responseType === 'none' ? null : res.body,
    headers: res.headers,
    proto: res.proto,
    url: String(url),
    error: res.error,
    error_code: res.error_code,
    timings: res.timings,
    request: { method, url: String(url), body: payload, headers },
    json(selector) {
      const v = JSON.parse(this.body);
      if (!selector) return v;
      return selector.split('.').reduce((o, k) => (o === undefined || o === null ? undefined : o[k]), v);
    },
  };
}

module.exports = {
  request,
  get: (url, params) => request('GET', url, null, params),
  head: (url, params) => request('HEAD', url, null, params),
  post: (url, body, params) => request('POST', url, body, params),
  put: (url, body, params) => request('PUT', url, body, params),
  patch: (url, body, params) => request('PATCH', url, body, params),
  del: (url, body, params) => request('DELETE', url, body, params),
  options: (url, body, params) => request('OPTIONS', url, body, params),
};
