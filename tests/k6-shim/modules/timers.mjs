// k6/timers: the VU-aware timers of ../lib/runtime.js
import { createRequire } from 'node:module';

const rt = createRequire(import.meta.url)('../lib/runtime.js');

export const setTimeout = rt.setTimeoutK6;
export const setInterval = rt.setIntervalK6;
export const clearTimeout = rt.clearTimerK6;
export const clearInterval = rt.clearTimerK6;
export default { setTimeout, setInterval, clearTimeout, clearInterval };
