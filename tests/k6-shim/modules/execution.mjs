// k6/execution: the scenario, VU, instance and test objects, read from the shim's state.
import { createRequire } from 'node:module';

const rt = createRequire(import.meta.url)('../lib/runtime.js');
const st = rt.state;

function need(what) {
  if (!st.vu && st.phase !== 'setup' && st.phase !== 'teardown') {
    throw new Error(`${what} is not available in the init context`);
  }
}

const scenario = {
  get name() { need('exec.scenario'); return st.scenario ? st.scenario.name : ''; },
  get executor() { need('exec.scenario'); return st.scenario ? st.scenario.executor : ''; },
  get startTime() { need('exec.scenario'); return st.scenario ? st.scenario.startTime : st.testStart; },
  get progress() { need('exec.scenario'); return st.scenario ? st.scenario.progress() : 0; },
  get iterationInInstance() { need('exec.scenario'); return st.scenario ? st.scenario.iterationsStarted - 1 : 0; },
  get iterationInTest() { need('exec.scenario'); return st.scenario ? st.scenario.iterationsStarted - 1 : 0; },
};

const vu = {
  get idInInstance() { need('exec.vu'); return st.vu ? st.vu.id : 0; },
  get idInTest() { need('exec.vu'); return st.vu ? st.vu.id : 0; },
  get iterationInInstance() { need('exec.vu'); return st.vu ? st.vu.iter : 0; },
  get iterationInScenario() { need('exec.vu'); return st.vu ? st.vu.iterInScenario : 0; },
  get tags() { need('exec.vu'); return st.vu.tags; },
  get metrics() { need('exec.vu'); return { tags: st.vu.tags, metadata: st.vu.metadata }; },
};

const instance = {
  get iterationsCompleted() { return st.iterationsCompleted; },
  get iterationsInterrupted() { return st.iterationsInterrupted; },
  get vusActive() { return 1; },
  get vusInitialized() { return 1; },
  get currentTestRunDuration() { return Date.now() - st.testStart; },
};

const test = {
  get options() { return st.options; },
  abort(reason) {
    const e = new Error(`test aborted: ${reason || ''}`);
    e.k6ShimAbort = true;
    st.aborted = reason || 'exec.test.abort()';
    throw e;
  },
};

export { scenario, vu, instance, test };
export default { scenario, vu, instance, test };
