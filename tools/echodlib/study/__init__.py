"""bench/study's library: the capacity study on one machine (bench/study is its command).

  plan      a run's durations and steps (full, --quick, --step-seconds, --top)
  regimes   how the unary ramp's load is held: the open model (VUs for the backlog, k6's
            collector, what this machine allows, the steps that fell short)
  cost      the synthetic cost per call (flat or a work.model preset) and its calibration
  server    the server under test (a Target), echod's CPU model, a measured Window
  drivers   k6 and h2load: the fixed-rate grid, the unary ramp, the stream ramp, the probe
  runner    one run: calibration, then every arm through the three experiments
  figures   the figures of a run's results (the findings', the tables' and the plots')
  tables    study.md's tables
  plots     study-*.png: echod's curves beside the published ones
  outputs   a run's outputs: the experiments' reports, study.md, study.json
  merge     --merge: several runs' findings side by side
  witness   --witness: the grpc-java peer's arms through the same experiments, beside echod's
  mux       --mux: the multiplexed-client shape (h2load, closed and open loop) and its figures

The findings themselves (published figures, verdicts) are echodlib.findings'.
"""

import sys


def log(msg):
    """A progress line on stderr (study.md goes to stdout)."""
    print(msg, file=sys.stderr, flush=True)
