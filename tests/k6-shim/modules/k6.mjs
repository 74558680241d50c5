// k6: check, group, sleep, fail (see ../lib/runtime.js)
import { createRequire } from 'node:module';

const rt = createRequire(import.meta.url)('../lib/runtime.js');

export const check = rt.check;
export const group = rt.group;
export const sleep = rt.sleep;
export const fail = rt.fail;
export function randomSeed() {}
export default { check, group, sleep, fail, randomSeed };
