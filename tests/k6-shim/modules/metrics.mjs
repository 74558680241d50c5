// k6/metrics: Counter, Gauge, Rate, Trend (see ../lib/runtime.js)
import { createRequire } from 'node:module';

const rt = createRequire(import.meta.url)('../lib/runtime.js');

export class Counter extends rt.CustomMetric { constructor(name, isTime) { super('counter', name, isTime); } }
export class Gauge extends rt.CustomMetric { constructor(name, isTime) { super('gauge', name, isTime); } }
export class Rate extends rt.CustomMetric { constructor(name, isTime) { super('rate', name, isTime); } }
export class Trend extends rt.CustomMetric { constructor(name, isTime) { super('trend', name, isTime); } }
export default { Counter, Gauge, Rate, Trend };
