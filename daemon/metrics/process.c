/*
 * The process and cgroup collector: what a scrape reads of the process from the kernel
 * (getrusage, /proc/self, the file limit) and of its cgroups (util/cgroup.h), and the families
 * that show it. The process families are client_golang's, so dashboards agree.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>
#include "metrics/metrics_internal.h"
#include "metrics/table.h"

/* Set once at start-up, before the admin thread (the only reader) exists. */
static double process_start_time;

/* Reads a small /proc file whole; returns its length or -1. */
static ssize_t read_proc(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return -1;
    size_t n = fread(buf, 1, cap - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return (ssize_t)n;
}

/*
 * Process start in seconds since the epoch: boot time plus the start tick from /proc/self/stat.
 * The wall clock at init would be off by however long the config load took; this is what
 * client_golang's process collector reports too, so dashboards agree.
 */
static double compute_start_time(void)
{
    char buf[1024];
    struct timeval now;
    gettimeofday(&now, NULL);
    double fallback = (double)now.tv_sec + now.tv_usec / 1e6;

    if (read_proc("/proc/self/stat", buf, sizeof(buf)) <= 0)
        return fallback;
    /* comm (field 2) may hold spaces and parentheses: fields are counted from the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return fallback;
    unsigned long long start_ticks = 0;
    int field = 2;
    char *save = NULL;
    for (char *tok = strtok_r(p + 1, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        if (++field == 22) {
            start_ticks = strtoull(tok, NULL, 10);
            break;
        }
    }
    if (field != 22)
        return fallback;

    FILE *fp = fopen("/proc/stat", "re");
    if (fp == NULL)
        return fallback;
    /* The intr line can be many kilobytes long, hence getline rather than a fixed buffer. */
    char *line = NULL;
    size_t linecap = 0;
    unsigned long long btime = 0;
    while (getline(&line, &linecap, fp) != -1) {
        if (strncmp(line, "btime ", 6) == 0) {
            btime = strtoull(line + 6, NULL, 10);
            break;
        }
    }
    free(line);
    fclose(fp);
    long hz = sysconf(_SC_CLK_TCK);
    if (btime == 0 || hz <= 0)
        return fallback;
    return (double)btime + (double)start_ticks / (double)hz;
}

void echod_metrics__process_init(void)
{
    process_start_time = compute_start_time();
}

/* The process's descriptors, less the one opendir holds; -1 when /proc/self/fd cannot be read. */
static long count_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    long nfds = 0;
    struct dirent *de;
    /* readdir_r is deprecated; readdir on a DIR this thread alone owns is thread-safe in glibc. */
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        /* The descriptor opendir itself holds is not one of the process's. */
        if (atoi(de->d_name) == dirfd(dir))
            continue;
        ++nfds;
    }
    closedir(dir);
    return nfds;
}

/*
 * The CPU limits and throttling of this process's cgroups, v1 or v2 (util/cgroup.h): throttling
 * is what a 1-CPU limit does to a ramp.
 */
static void read_cgroup(echod_metrics__sample_t *s)
{
    echod_cgroup_read_cpu("", &s->cgroup);
    s->has_quota = s->cgroup.quota_cpus > 0;
    s->has_cpuset = s->cgroup.cpuset_cpus != 0;
    s->cpuset_cpus = s->cgroup.cpuset_cpus;
    s->effective_cpus = echod_exec_available_cpus();
}

void echod_metrics__read_process(echod_metrics__sample_t *s)
{
    char buf[4096];
    read_cgroup(s);

    struct rusage ru;
    if ((s->has_rusage = getrusage(RUSAGE_SELF, &ru) == 0)) {
        s->cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                         ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
        s->context_switches[0] = ru.ru_nvcsw;
        s->context_switches[1] = ru.ru_nivcsw;
    }

    unsigned long long vsz_pages, rss_pages;
    if ((s->has_statm = read_proc("/proc/self/statm", buf, sizeof(buf)) > 0 &&
                        sscanf(buf, "%llu %llu", &vsz_pages, &rss_pages) == 2)) {
        unsigned long long page = (unsigned long long)sysconf(_SC_PAGESIZE);
        s->virtual_bytes = vsz_pages * page;
        s->resident_bytes = rss_pages * page;
    }

    long nfds = count_fds();
    if ((s->has_fds = nfds >= 0))
        s->open_fds = (uint64_t)nfds;

    struct rlimit rl;
    if ((s->has_max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0)) {
        s->max_fds_unlimited = rl.rlim_cur == RLIM_INFINITY;
        s->max_fds = (uint64_t)rl.rlim_cur;
    }

    s->start_time = process_start_time;
    s->has_start_time = process_start_time != 0;

    if (read_proc("/proc/self/status", buf, sizeof(buf)) > 0) {
        const char *t = strstr(buf, "\nThreads:");
        if ((s->has_threads = t != NULL))
            s->threads = strtoul(t + 9, NULL, 10);
    }
}

/* -------------------------------------------------------------------------------------------- */
/* the families */

static void cgroup_info_series(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    echod_metrics__label(r, "cpu", echod_cgroup_version_names[r->sample.cgroup.version]);
    echod_metrics__write_u64(r, f, 1);
}

static void max_fds_series(echod_metrics__render_t *r, const echod_metrics__family_t *f)
{
    if (r->sample.max_fds_unlimited)
        echod_metrics__write_inf(r, f);
    else
        echod_metrics__write_u64(r, f, r->sample.max_fds);
}

static const echod_metrics__family_t cgroup_families[] = {
    {"echod_cgroup_info", GAUGE, "The cgroup version the cpu controller was read from (v1, v2, none).",
     .series = cgroup_info_series},
    {"echod_cgroup_cpu_quota_cpus", GAUGE,
     "The tightest CPU quota on this process's cgroup path, quota / period (v2 cpu.max, "
     "v1 cpu.cfs_quota_us / cpu.cfs_period_us).",
     SAMPLE(cgroup.quota_cpus), DOUBLE, SHOWN_IF(has_quota)},
    {"echod_cgroup_cpuset_cpus", GAUGE, "CPUs in the smallest cpuset on this process's cgroup path.",
     SAMPLE(cpuset_cpus), SHOWN_IF(has_cpuset)},
    {"echod_cgroup_cpu_throttled_periods_total", COUNTER,
     "cgroup cpu.stat nr_throttled: CFS periods in which the cgroup was throttled.", SAMPLE(cgroup.nr_throttled),
     SHOWN_IF(cgroup.has_stat)},
    {"echod_cgroup_cpu_periods_total", COUNTER, "cgroup cpu.stat nr_periods.", SAMPLE(cgroup.nr_periods),
     SHOWN_IF(cgroup.has_stat)},
    {"echod_cgroup_cpu_throttled_seconds_total", COUNTER,
     "cgroup cpu.stat throttled time (v2 throttled_usec, v1 throttled_time), in seconds.",
     SAMPLE(cgroup.throttled_usec), SCALED(1e6), SHOWN_IF(cgroup.has_stat)},
    {"echod_effective_cpus", GAUGE,
     "CPUs this process may use: the tightest cgroup CPU quota rounded up or cpuset, capped by the affinity mask.",
     SAMPLE(effective_cpus)},
};

static const char *const switch_kinds[] = {"voluntary", "involuntary"};

static const echod_metrics__family_t process_families[] = {
    {"process_cpu_seconds_total", COUNTER, "CPU time used by the process (user + system), in seconds.",
     SAMPLE(cpu_seconds), DOUBLE, SHOWN_IF(has_rusage)},
    /* RUSAGE_SELF sums every thread, those that have exited included (the kernel folds a thread's
     * counts into the process when it exits), so a cached pool's aged-out workers still count:
     * the figure bench/compare divides by calls. */
    {"echod_context_switches_total", COUNTER,
     "Context switches of all threads of the process, exited ones included (getrusage): voluntary = "
     "the thread blocked (a hand-off, a park), involuntary = it was preempted.",
     SAMPLE(context_switches), SIGNED, SHOWN_IF(has_rusage),
     .label = {LABEL("kind", switch_kinds, NELEMS(switch_kinds), sizeof(int64_t))}},
    {"process_virtual_memory_bytes", GAUGE, "Size of the address space, in bytes.", SAMPLE(virtual_bytes),
     SHOWN_IF(has_statm)},
    {"process_resident_memory_bytes", GAUGE, "Memory resident in RAM, in bytes.", SAMPLE(resident_bytes),
     SHOWN_IF(has_statm)},
    {"process_open_fds", GAUGE, "File descriptors the process has open.", SAMPLE(open_fds), SHOWN_IF(has_fds)},
    {"process_max_fds", GAUGE, "Soft limit on open file descriptors.", .series = max_fds_series, SHOWN_IF(has_max_fds)},
    {"process_start_time_seconds", GAUGE, "When the process started, in seconds since the Unix epoch.",
     SAMPLE(start_time), DOUBLE, SHOWN_IF(has_start_time)},
    {"echod_threads", GAUGE, "Threads in the process.", SAMPLE(threads), SHOWN_IF(has_threads)},
};

_Static_assert(NELEMS(switch_kinds) == NELEMS(((echod_metrics__sample_t *)0)->context_switches),
               "a kind per context switch count");

const echod_metrics__table_t echod_metrics__cgroup_table = {cgroup_families, NELEMS(cgroup_families)};
const echod_metrics__table_t echod_metrics__process_table = {process_families, NELEMS(process_families)};
