/*
 * util/cgroup: the CPU limit reader on fixture trees (a directory holding proc/self/cgroup and
 * sys/fs/cgroup/...) for cgroup v2, v1, hybrid hosts, nested limits, no limit, and files that
 * cannot be read. The real thing (echod in a v1 cgroup with a quota) is
 * tests/integration/test_cgroup.py.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "util/cgroup.h"

static char root[256];

static void mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    mkdir(buf, 0755);
}

/* Writes root/rel (creating its directories); rel ending in '/' makes just the directory. */
static void put(const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdirs(path);
    *slash = '/';
    if (slash[1] == '\0')
        return;
    FILE *fp = fopen(path, "w");
    if (fp == NULL) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fputs(text, fp);
    fclose(fp);
}

/* A fresh, empty fixture tree. */
static void fresh(const char *name)
{
    char cmd[512];
    if (root[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
            exit(1);
    }
    snprintf(root, sizeof(root), "/tmp/echod-cgroup-%s-XXXXXX", name);
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        exit(1);
    }
}

static echod_cgroup_cpu_t read_tree(void)
{
    echod_cgroup_cpu_t cg;
    memset(&cg, 0xa5, sizeof(cg)); /* the reader must set every field */
    echod_cgroup_read_cpu(root, &cg);
    return cg;
}

static int near(double a, double b)
{
    return a > b - 1e-9 && a < b + 1e-9;
}

static void test_parsers(void)
{
    double cpus = 99;
    CHECK(echod_cgroup_parse_cpu_max("max 100000\n", &cpus) == 0);
    CHECK(echod_cgroup_parse_cpu_max("max\n", &cpus) == 0);
    CHECK(echod_cgroup_parse_cpu_max("100000 100000\n", &cpus) == 1 && near(cpus, 1));
    CHECK(echod_cgroup_parse_cpu_max("150000 100000\n", &cpus) == 1 && near(cpus, 1.5));
    CHECK(echod_cgroup_parse_cpu_max("50000 100000", &cpus) == 1 && near(cpus, 0.5));
    CHECK(echod_cgroup_parse_cpu_max("400000 100000\n", &cpus) == 1 && near(cpus, 4));
    CHECK(echod_cgroup_parse_cpu_max("", &cpus) == -1);
    CHECK(echod_cgroup_parse_cpu_max("lots\n", &cpus) == -1);
    CHECK(echod_cgroup_parse_cpu_max("100000 0\n", &cpus) == -1);

    CHECK(echod_cgroup_count_cpu_list("0-3,8,10-11\n") == 7);
    CHECK(echod_cgroup_count_cpu_list("0\n") == 1);
    CHECK(echod_cgroup_count_cpu_list("5") == 1);
    CHECK(echod_cgroup_count_cpu_list("\n") == 0);
    CHECK(echod_cgroup_count_cpu_list("") == 0);
    CHECK(echod_cgroup_count_cpu_list("3-1") == 0);
    CHECK(echod_cgroup_count_cpu_list("0-1x") == 0);

    echod_cgroup_cpu_t c = {.quota_cpus = 1.5};
    CHECK(echod_cgroup_cpu_limit(&c) == 2);
    c.quota_cpus = 0.2;
    CHECK(echod_cgroup_cpu_limit(&c) == 1);
    c.quota_cpus = 2;
    CHECK(echod_cgroup_cpu_limit(&c) == 2);
    c.cpuset_cpus = 1;
    CHECK(echod_cgroup_cpu_limit(&c) == 1);
    c.quota_cpus = 0;
    c.cpuset_cpus = 3;
    CHECK(echod_cgroup_cpu_limit(&c) == 3);
    c.cpuset_cpus = 0;
    CHECK(echod_cgroup_cpu_limit(&c) == 0);
}

/* Pure v2: a pod's cpu.max binds the container below it that says "max". */
static void test_v2(void)
{
    fresh("v2");
    put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
    put("sys/fs/cgroup/cpu.stat", "usage_usec 1\n");
    put("sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/kubepods/pod1/cpu.max", "100000 100000\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective", "0-3\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.stat",
        "usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 10\nnr_throttled 3\nthrottled_usec 2500\n");
    echod_cgroup_cpu_t cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V2);
    CHECK(near(cg.quota_cpus, 1));
    CHECK(cg.cpuset_cpus == 4);
    CHECK(echod_cgroup_cpu_limit(&cg) == 1);
    CHECK(cg.has_stat && cg.nr_periods == 10 && cg.nr_throttled == 3 && cg.throttled_usec == 2500);
}

/* v2 without any limit: no quota, no cpuset, the throttling counters still read. */
static void test_v2_unlimited(void)
{
    fresh("v2max");
    put("proc/self/cgroup", "0::/system.slice/echod.service\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    put("sys/fs/cgroup/system.slice/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/system.slice/echod.service/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/system.slice/echod.service/cpu.stat", "usage_usec 9\nnr_periods 0\nnr_throttled 0\n"
                                                             "throttled_usec 0\n");
    echod_cgroup_cpu_t cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V2);
    CHECK(cg.quota_cpus == 0 && cg.cpuset_cpus == 0);
    CHECK(echod_cgroup_cpu_limit(&cg) == 0);
    CHECK(cg.has_stat && cg.nr_periods == 0 && cg.nr_throttled == 0);

    /* inside a cgroup namespace: our cgroup is "/" and the mount holds its files */
    fresh("v2ns");
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    put("sys/fs/cgroup/cpu.max", "250000 100000\n");
    cg = read_tree();
    CHECK(near(cg.quota_cpus, 2.5) && echod_cgroup_cpu_limit(&cg) == 3);
    CHECK(!cg.has_stat);

    /* a cgroup outside our namespace: the mount is all we can see of it, not a namesake below */
    put("proc/self/cgroup", "0::/../sibling\n");
    put("sys/fs/cgroup/sibling/cpu.max", "50000 100000\n");
    cg = read_tree();
    CHECK(near(cg.quota_cpus, 2.5));
}

/* v1: cpu,cpuacct co-mounted, a cpuset, throttled_time in ns; name=systemd is not a controller. */
static void test_v1(void)
{
    fresh("v1");
    put("proc/self/cgroup", "12:name=systemd:/docker/abc\n5:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
                            "2:memory:/docker/abc\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.stat", "nr_periods 7\nnr_throttled 2\nthrottled_time 3000000\n");
    put("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-7\n");
    put("sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus", "0-1,3\n");
    put("sys/fs/cgroup/systemd/docker/abc/cpu.cfs_quota_us", "1000\n"); /* not a cpu hierarchy */
    echod_cgroup_cpu_t cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V1);
    CHECK(near(cg.quota_cpus, 1.5));
    CHECK(cg.cpuset_cpus == 3);
    CHECK(echod_cgroup_cpu_limit(&cg) == 2);
    CHECK(cg.has_stat && cg.nr_periods == 7 && cg.nr_throttled == 2 && cg.throttled_usec == 3000);

    /* a cpuset alone; an older kernel without effective_cpus */
    fresh("v1cpuset");
    put("proc/self/cgroup", "3:cpuset:/job\n1:cpu:/job\n");
    put("sys/fs/cgroup/cpu/job/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu/job/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpuset/job/cpuset.cpus", "2\n");
    cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V1 && cg.quota_cpus == 0 && cg.cpuset_cpus == 1);
    CHECK(echod_cgroup_cpu_limit(&cg) == 1);

    /* a container without a cgroup namespace: the mount is its own cgroup, so the path that
     * /proc/self/cgroup names (the host's) is not under it */
    fresh("v1ctr");
    put("proc/self/cgroup", "4:cpu,cpuacct:/kubepods/burstable/pod9/ctr7\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "100000\n");
    put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V1 && near(cg.quota_cpus, 1));
}

/* Hybrid (systemd's, as on the machine these tests run on): controllers on v1, an empty v2 at
 * /sys/fs/cgroup/unified whose cpu.stat has no throttling. */
static void test_hybrid(void)
{
    fresh("hybrid");
    put("proc/self/cgroup", "9:name=systemd:/a/b\n3:cpuset:/\n1:cpu:/a/b\n0::/a/b\n");
    put("sys/fs/cgroup/unified/cgroup.controllers", "\n");
    put("sys/fs/cgroup/unified/a/b/cpu.stat", "usage_usec 10\nuser_usec 5\nsystem_usec 5\n");
    put("sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "100000\n");
    put("sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/a/b/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu/a/b/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/a/b/cpu.stat", "nr_periods 4\nnr_throttled 1\nthrottled_time 999\n");
    put("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-1\n");
    echod_cgroup_cpu_t cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V1);
    CHECK(near(cg.quota_cpus, 1));
    CHECK(cg.cpuset_cpus == 2);
    CHECK(echod_cgroup_cpu_limit(&cg) == 1);
    CHECK(cg.has_stat && cg.nr_periods == 4 && cg.nr_throttled == 1 && cg.throttled_usec == 0);

    /* the same order the other way round: v2's line first changes nothing */
    put("proc/self/cgroup", "0::/a/b\n1:cpu:/a/b\n");
    cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V1 && near(cg.quota_cpus, 1) && cg.has_stat && cg.nr_periods == 4);
}

/* The tightest limit wins wherever it sits on the path. */
static void test_nested(void)
{
    fresh("nested1");
    put("proc/self/cgroup", "1:cpu:/g/p/c\n");
    put("sys/fs/cgroup/cpu/g/cpu.cfs_quota_us", "50000\n");
    put("sys/fs/cgroup/cpu/g/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/g/p/cpu.cfs_quota_us", "300000\n");
    put("sys/fs/cgroup/cpu/g/p/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/g/p/c/cpu.cfs_quota_us", "200000\n");
    put("sys/fs/cgroup/cpu/g/p/c/cpu.cfs_period_us", "100000\n");
    echod_cgroup_cpu_t cg = read_tree();
    CHECK(near(cg.quota_cpus, 0.5) && echod_cgroup_cpu_limit(&cg) == 1);

    fresh("nested2");
    put("proc/self/cgroup", "0::/g/p/c\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpu cpuset\n");
    put("sys/fs/cgroup/g/cpu.max", "800000 100000\n");
    put("sys/fs/cgroup/g/p/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/g/p/c/cpu.max", "300000 100000\n");
    put("sys/fs/cgroup/g/cpuset.cpus.effective", "0-15\n");
    put("sys/fs/cgroup/g/p/c/cpuset.cpus.effective", "0-1\n");
    cg = read_tree();
    CHECK(near(cg.quota_cpus, 3) && cg.cpuset_cpus == 2 && echod_cgroup_cpu_limit(&cg) == 2);
}

/* Files that cannot be read or are not understood are no limit; one elsewhere still binds. */
static void test_unreadable(void)
{
    fresh("none");
    echod_cgroup_cpu_t cg = read_tree(); /* no proc/self/cgroup at all */
    CHECK(cg.version == ECHOD_CGROUP_NONE && cg.quota_cpus == 0 && cg.cpuset_cpus == 0 && !cg.has_stat);
    CHECK(echod_cgroup_cpu_limit(&cg) == 0);

    fresh("unreadable");
    put("proc/self/cgroup", "0::/p/c\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpu\n");
    put("sys/fs/cgroup/p/cpu.max", "200000 100000\n");
    /* a read fails even for root: a directory where the file should be */
    put("sys/fs/cgroup/p/c/cpu.max/", "");
    put("sys/fs/cgroup/p/c/cpu.stat", "nr_periods 1\nnr_throttled 1\nthrottled_usec 5\n");
    char path[1024];
    snprintf(path, sizeof(path), "%s/sys/fs/cgroup/p/c/cpu.stat", root);
    chmod(path, 0); /* unreadable unless root */
    cg = read_tree();
    CHECK(near(cg.quota_cpus, 2));
    CHECK(cg.has_stat == (geteuid() == 0));

    fresh("garbage");
    put("proc/self/cgroup", "garbage line\n1:cpu:/x\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "100000\n");
    put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/x/cpu.cfs_quota_us", "lots\n");
    put("sys/fs/cgroup/cpu/x/cpu.cfs_period_us", "100000\n");
    put("sys/fs/cgroup/cpu/x/cpu.stat", "nr_periods x\n");
    cg = read_tree();
    CHECK(cg.version == ECHOD_CGROUP_V1 && near(cg.quota_cpus, 1) && !cg.has_stat);

    /* the period is 0 or missing: no quota from that directory */
    put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "0\n");
    cg = read_tree();
    CHECK(cg.quota_cpus == 0);
}

int main(void)
{
    test_parsers();
    test_v2();
    test_v2_unlimited();
    test_v1();
    test_hybrid();
    test_nested();
    test_unreadable();
    fresh("done");
    rmdir(root);
    return check_done();
}
