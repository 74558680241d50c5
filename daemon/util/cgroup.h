#ifndef ECHOD_UTIL_CGROUP_H
#define ECHOD_UTIL_CGROUP_H

/*
 * The CPU limits of the cgroups this process is in, cgroup v2 and v1 alike (docs/cgroups.md).
 *
 * From the path of each hierarchy in /proc/self/cgroup: v2's cpu.max and cpuset.cpus.effective,
 * v1's cpu.cfs_quota_us / cpu.cfs_period_us (the cpu controller) and cpuset.effective_cpus (the
 * cpuset controller), from our own cgroup up to the hierarchy's mount, the tightest of each (a
 * pod's limit binds the container below it that says "max"); and cpu.stat (periods, throttling)
 * of our own cgroup of the hierarchy that holds the cpu controller.
 *
 * One reader for the executor's `threads: 0` sizing and for /metrics. It keeps no state and reads
 * the files on every call: any thread. Files that are missing, unreadable or not understood count
 * as "no limit there"; a limit elsewhere on the path still applies.
 */

#include <stdint.h>

typedef enum {
    ECHOD_CGROUP_NONE = 0, /* no cpu controller found */
    ECHOD_CGROUP_V1,
    ECHOD_CGROUP_V2,
    ECHOD_CGROUP__COUNT
} echod_cgroup_version_t;
/* "none", "v1", "v2": label values indexed by the version (cgroup.c asserts one per version). */
extern const char *const echod_cgroup_version_names[];

typedef struct {
    /* The hierarchy the cpu controller (quota, cpu.stat) was read from. */
    echod_cgroup_version_t version;
    /* The tightest quota / period along the path, in CPUs (1.5 for "150000 100000"); 0: none. */
    double quota_cpus;
    /* CPUs in the smallest cpuset along the path; 0: no cpuset found. */
    unsigned cpuset_cpus;
    /* cpu.stat of our own cgroup: has_stat is 0 when it was not read or lacks nr_throttled. */
    int has_stat;
    uint64_t nr_periods;
    uint64_t nr_throttled;
    uint64_t throttled_usec; /* v2 throttled_usec; v1 throttled_time (ns) / 1000 */
} echod_cgroup_cpu_t;

/*
 * Fills *out from the tree under `root`: "" for this system (/proc/self/cgroup, /sys/fs/cgroup),
 * a directory holding proc/self/cgroup and sys/fs/cgroup/... for the unit tests' fixture trees.
 */
void echod_cgroup_read_cpu(const char *root, echod_cgroup_cpu_t *out);

/* Whole CPUs the limits allow: the quota rounded up, capped by the cpuset; 0 when neither is set. */
unsigned echod_cgroup_cpu_limit(const echod_cgroup_cpu_t *cpu);

/*
 * Parses v2 cpu.max ("QUOTA PERIOD" or "max PERIOD"). Returns 1 and sets *cpus to quota / period,
 * 0 for "max" (no quota), -1 if the text is not understood.
 */
int echod_cgroup_parse_cpu_max(const char *text, double *cpus);

/* The number of CPUs in a cpuset list ("0-3,8,10-11\n" is 7); 0 for an empty or bad list. */
unsigned echod_cgroup_count_cpu_list(const char *text);

#endif
