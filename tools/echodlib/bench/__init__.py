"""The library half of the bench/ commands: what each measures and how it prints it, one module
a command (bench/NAME is its argument parsing and its main). What several share lives a level up
(echodlib.h2load, daemon, peers, procstat, fmt, stats, build, machine)."""
