// Module resolution hooks (module.register): `k6`, `k6/net/grpc`, `k6/http`, `k6/metrics`,
// `k6/execution` and `k6/timers` resolve to ./modules/*.mjs; any other `k6/...` or remote
// import is an error naming the module. The script and the local files it imports are
// loaded as ES modules whatever their extension, and each VU gets its own instance: the
// `?vu=N` query of the script's URL is carried into its relative imports.

const MODULES = {
  k6: 'k6.mjs',
  'k6/net/grpc': 'grpc.mjs',
  'k6/http': 'http.mjs',
  'k6/metrics': 'metrics.mjs',
  'k6/execution': 'execution.mjs',
  'k6/timers': 'timers.mjs',
};

export async function resolve(specifier, context, nextResolve) {
  if (specifier === 'k6' || specifier.startsWith('k6/')) {
    const file = MODULES[specifier];
    if (!file) throw new Error(`k6-shim: module ${specifier} is not provided by the shim`);
    return { url: new URL(`./modules/${file}`, import.meta.url).href, shortCircuit: true };
  }
  if (/^https?:\/\//.test(specifier)) {
    throw new Error(`k6-shim: remote module ${specifier} cannot be loaded (no network modules)`);
  }
  const parent = context.parentURL ? new URL(context.parentURL) : null;
  if (parent && parent.searchParams.has('k6shim') && (specifier.startsWith('./') || specifier.startsWith('../'))) {
    const url = new URL(specifier, parent);
    url.search = parent.search;
    return { url: url.href, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}

export async function load(url, context, nextLoad) {
  if (url.startsWith('file:') && new URL(url).searchParams.has('k6shim')) {
    return nextLoad(url, { ...context, format: 'module' });
  }
  return nextLoad(url, context);
}
