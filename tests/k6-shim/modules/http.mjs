// k6/http (see ../lib/http.js)
import { createRequire } from 'node:module';

const h = createRequire(import.meta.url)('../lib/http.js');

export const { request, get, head, post, put, patch, del, options } = h;
export default h;
