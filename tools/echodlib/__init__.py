"""echodlib: the one Python library of echod's tooling.

Shared by the integration tests (tests/integration/echod_harness.py re-exports it), bench/*,
bench/study and deploy/report (thin commands over it); unit-tested where it computes without a
daemon (tests/tools/test_echodlib.py). Standard library and Debian's packages
(/usr/bin/python3), one module per need:

  paths    the repository root and the echod binary
  ports    free loopback ports
  prom     /metrics: scrape, parse (Prometheus text 0.0.4, python3-prometheus-client), deltas,
           check_exposition
  promserver a local Prometheus (Debian's) and PromQL over its HTTP API
  stats    percentiles, medians, the spread of repeated runs
  fmt      numbers in tables: one formatter for every script
  procstat CPU time and RSS of a process from /proc (CpuWindow: a process's CPU over a run;
           ThreadWindow: its CPU and context switches by group of threads)
  h2load   the one h2load runner: command lines, runs (and the server's CPU over them), summaries,
           latency logs, request bodies
  k6       finding the k6 binary, its version, its busy VUs
  daemon   starting and stopping echod on free ports: the launcher of a server under test
  peers    building and running the grpc-java and grpc C++ peers of ../shared/peers
  jvm      a JVM server read from outside: its threads by group, its JIT's warm-up, its
           safepoints and collections from unified logging
  build    the release build the benchmarks measure, and telling a release build from another
  machine  the machine a benchmark ran on, the tools and CPUs it needs
  h2idle   idle raw HTTP/2 connections (RSS per connection)
  bidi     the bidi load generator (bench/compare --bidi-client)
  grpccheck a grpcio client's check of a server before it is measured
  sampler  a background time series (CPU, RSS, scrapes) to cut a run by step
  findings the capacity study's findings: published figures, verdict rules, tables
  bench/   the library half of each bench/ command (arms, compare, soak, model and peer_load,
           callgrind, ab, drain_depth): what it measures and how it prints it
  report   a capacity report's steps, knee, plateau, and its k6 runners merged
  k6result reading k6's outputs (CSV, --out json, handleSummary), bench/study's steps,
           bench/arms JSON and /metrics scrapes into a report
  k6prom   reading the same runs from a Prometheus (k6's remote write, echod's scrapes)
  report_out  a report written out: report.md, report.json, its plots (deploy/report)
  plotting matplotlib set up for the reports' plots
  study    bench/study's runner, regimes, cost, tables and plots (a package)

Import it by putting <root>/tools on sys.path:

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from echodlib import ports, prom
"""
