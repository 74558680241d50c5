#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/cgroup.h"
#include "util/err.h"

const char *const echod_cgroup_version_names[] = {
    [ECHOD_CGROUP_NONE] = "none",
    [ECHOD_CGROUP_V1] = "v1",
    [ECHOD_CGROUP_V2] = "v2",
};
_Static_assert(sizeof(echod_cgroup_version_names) / sizeof(echod_cgroup_version_names[0]) == ECHOD_CGROUP__COUNT,
               "a name per cgroup version");

#define CGROUP_PATH_MAX 4096

/* One hierarchy's directories: `mount` is where it is mounted, `own` our cgroup below it. */
typedef struct {
    char mount[CGROUP_PATH_MAX];
    char own[CGROUP_PATH_MAX];
} cgroup_dirs_t;

/* Reads a small file whole; 0 on success. A directory or unreadable file fails the read. */
static int read_small(const char *dir, const char *name, char *buf, size_t cap)
{
    char path[CGROUP_PATH_MAX + 64];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return -1;
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return -1;
    size_t n = fread(buf, 1, cap - 1, fp);
    int bad = ferror(fp);
    fclose(fp);
    if (bad || n == 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int echod_cgroup_parse_cpu_max(const char *text, double *cpus)
{
    unsigned long long quota, period;
    char *end;

    while (*text == ' ' || *text == '\t')
        text++;
    if (strncmp(text, "max", 3) == 0 && (text[3] == ' ' || text[3] == '\n' || text[3] == '\0'))
        return 0;
    errno = 0;
    quota = strtoull(text, &end, 10);
    if (end == text || errno != 0 || *end != ' ')
        return -1;
    text = end + 1;
    period = strtoull(text, &end, 10);
    if (end == text || errno != 0 || (*end != '\n' && *end != '\0') || period == 0 || quota == 0)
        return -1;
    *cpus = (double)quota / (double)period;
    return 1;
}

/* A v1 integer file: cpu.cfs_quota_us is -1 without a quota. 1 and *v when positive. */
static int read_positive(const char *dir, const char *name, long long *v)
{
    char text[64], *end;
    if (read_small(dir, name, text, sizeof(text)) != 0)
        return 0;
    errno = 0;
    long long n = strtoll(text, &end, 10);
    if (end == text || errno != 0 || (*end != '\n' && *end != '\0') || n <= 0)
        return 0;
    *v = n;
    return 1;
}

unsigned echod_cgroup_count_cpu_list(const char *text)
{
    unsigned long count = 0;
    const char *p = text;
    while (*p != '\0' && *p != '\n') {
        char *end;
        errno = 0;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        if (end == p || errno != 0)
            return 0;
        p = end;
        if (*p == '-') {
            hi = strtoul(p + 1, &end, 10);
            if (end == p + 1 || errno != 0 || hi < lo)
                return 0;
            p = end;
        }
        count += hi - lo + 1;
        if (count > UINT_MAX)
            return 0;
        if (*p == ',')
            p++;
        else if (*p != '\0' && *p != '\n')
            return 0;
    }
    return (unsigned)count;
}

/*
 * Our cgroup's directory under `mount` for the path /proc/self/cgroup gives. Without a cgroup
 * namespace a container's mount can be its own cgroup (the path then names directories that are
 * not there): leading components are dropped until the rest exists, at worst the mount itself.
 * A path outside our namespace ("/../x") is the mount itself: nothing below it is ours.
 */
static int resolve(cgroup_dirs_t *d, const char *mount, const char *path)
{
    if (!is_dir(mount) || strlen(mount) >= sizeof(d->mount))
        return -1;
    strcpy(d->mount, mount);
    strcpy(d->own, mount);
    if (strstr(path, "/..") != NULL)
        return 0;
    for (const char *rest = path; rest != NULL; rest = strchr(rest + 1, '/')) {
        while (*rest == '/')
            rest++;
        if (*rest == '\0')
            break;
        if ((size_t)snprintf(d->own, sizeof(d->own), "%s/%s", mount, rest) < sizeof(d->own) && is_dir(d->own))
            return 0;
        if (strchr(rest, '/') == NULL)
            break;
    }
    strcpy(d->own, d->mount);
    return 0;
}

/* Calls visit(dir) from our own cgroup up to the mount, both included. */
static void walk_up(const cgroup_dirs_t *d, void (*visit)(const char *dir, void *arg), void *arg)
{
    char dir[CGROUP_PATH_MAX];
    size_t floor = strlen(d->mount);
    strcpy(dir, d->own);
    for (;;) {
        visit(dir, arg);
        if (strlen(dir) <= floor)
            break;
        char *slash = strrchr(dir, '/');
        if (slash == NULL || (size_t)(slash - dir) < floor)
            break;
        *slash = '\0';
    }
}

static void tighter_quota(echod_cgroup_cpu_t *out, double cpus)
{
    if (cpus > 0 && (out->quota_cpus == 0 || cpus < out->quota_cpus))
        out->quota_cpus = cpus;
}

static void visit_v2_cpu(const char *dir, void *arg)
{
    char text[128];
    double cpus;
    if (read_small(dir, "cpu.max", text, sizeof(text)) == 0 && echod_cgroup_parse_cpu_max(text, &cpus) == 1)
        tighter_quota(arg, cpus);
}

static void visit_v1_cpu(const char *dir, void *arg)
{
    long long quota, period;
    if (read_positive(dir, "cpu.cfs_quota_us", &quota) && read_positive(dir, "cpu.cfs_period_us", &period))
        tighter_quota(arg, (double)quota / (double)period);
}

static void smaller_cpuset(const char *dir, const char *name, echod_cgroup_cpu_t *out)
{
    char text[4096];
    unsigned n;
    if (read_small(dir, name, text, sizeof(text)) == 0 && (n = echod_cgroup_count_cpu_list(text)) != 0 &&
        (out->cpuset_cpus == 0 || n < out->cpuset_cpus))
        out->cpuset_cpus = n;
}

static void visit_v2_cpuset(const char *dir, void *arg)
{
    smaller_cpuset(dir, "cpuset.cpus.effective", arg);
}

static void visit_v1_cpuset(const char *dir, void *arg)
{
    char probe[8];
    /* effective_cpus is what the kernel applies; older kernels have only cpuset.cpus. */
    if (read_small(dir, "cpuset.effective_cpus", probe, sizeof(probe)) == 0)
        smaller_cpuset(dir, "cpuset.effective_cpus", arg);
    else
        smaller_cpuset(dir, "cpuset.cpus", arg);
}

/* cpu.stat lines "key value"; the throttling counters are what a CPU limit does to a ramp. */
static void read_stat(const char *dir, echod_cgroup_version_t version, echod_cgroup_cpu_t *out)
{
    char text[2048];
    if (read_small(dir, "cpu.stat", text, sizeof(text)) != 0)
        return;
    int throttled = 0;
    uint64_t periods = 0, nr = 0, usec = 0;
    for (char *line = text; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        char *sp = strchr(line, ' ');
        if (sp != NULL) {
            *sp = '\0';
            uint64_t v = strtoull(sp + 1, NULL, 10);
            if (strcmp(line, "nr_periods") == 0)
                periods = v;
            else if (strcmp(line, "nr_throttled") == 0)
                nr = v, throttled = 1;
            else if (version == ECHOD_CGROUP_V2 && strcmp(line, "throttled_usec") == 0)
                usec = v;
            else if (version == ECHOD_CGROUP_V1 && strcmp(line, "throttled_time") == 0)
                usec = v / 1000;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    if (!throttled)
        return; /* v2 without the cpu controller: only usage, no throttling */
    out->has_stat = 1;
    out->nr_periods = periods;
    out->nr_throttled = nr;
    out->throttled_usec = usec;
}

/* Whether `name` is one of the comma-separated controllers in `list`. */
static int has_controller(const char *list, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p < list + len;) {
        const char *comma = memchr(p, ',', (size_t)(list + len - p));
        size_t l = comma != NULL ? (size_t)(comma - p) : (size_t)(list + len - p);
        if (l == n && memcmp(p, name, n) == 0)
            return 1;
        p += l + 1;
    }
    return 0;
}

/* The v1 mount of a controller: named after the line's controller list, or after the controller. */
static int v1_dirs(cgroup_dirs_t *d, const char *root, const char *list, size_t len, const char *name, const char *path)
{
    char mount[CGROUP_PATH_MAX];
    snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/%.*s", root, (int)len, list);
    if (resolve(d, mount, path) == 0)
        return 0;
    snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/%s", root, name);
    return resolve(d, mount, path);
}

void echod_cgroup_read_cpu(const char *root, echod_cgroup_cpu_t *out)
{
    char path[CGROUP_PATH_MAX + 64], line[CGROUP_PATH_MAX + 256];
    memset(out, 0, sizeof(*out));
    snprintf(path, sizeof(path), "%s/proc/self/cgroup", root);
    FILE *fp = fopen(path, "re");
    if (fp == NULL)
        return;
    cgroup_dirs_t *d = echod_must(malloc(sizeof(*d)), "cgroup paths");
    int v1_cpu = 0;
    while (fgets(line, sizeof(line), fp) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        /* "ID:CONTROLLERS:PATH"; v2 is "0::PATH" */
        char *c1 = strchr(line, ':'), *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        const char *list = c1 + 1, *cg = c2 + 1;
        size_t len = (size_t)(c2 - list);
        if (len == 0 && strncmp(line, "0:", 2) == 0) {
            char mount[CGROUP_PATH_MAX];
            /* pure v2 at /sys/fs/cgroup; hybrid hosts mount it at /sys/fs/cgroup/unified */
            snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup", root);
            snprintf(path, sizeof(path), "%s/cgroup.controllers", mount);
            if (access(path, F_OK) != 0)
                snprintf(mount, sizeof(mount), "%s/sys/fs/cgroup/unified", root);
            if (resolve(d, mount, cg) != 0)
                continue;
            double before = out->quota_cpus;
            walk_up(d, visit_v2_cpu, out);
            walk_up(d, visit_v2_cpuset, out);
            if (!v1_cpu) {
                read_stat(d->own, ECHOD_CGROUP_V2, out);
                if (out->has_stat || out->quota_cpus != before)
                    out->version = ECHOD_CGROUP_V2;
            }
            continue;
        }
        if (has_controller(list, len, "cpu") && v1_dirs(d, root, list, len, "cpu", cg) == 0) {
            /* the v1 cpu controller is the one that applies: v2 has none on such a host */
            v1_cpu = 1;
            out->version = ECHOD_CGROUP_V1;
            walk_up(d, visit_v1_cpu, out);
            out->has_stat = 0;
            read_stat(d->own, ECHOD_CGROUP_V1, out);
        }
        if (has_controller(list, len, "cpuset") && v1_dirs(d, root, list, len, "cpuset", cg) == 0)
            walk_up(d, visit_v1_cpuset, out);
    }
    fclose(fp);
    free(d);
}

unsigned echod_cgroup_cpu_limit(const echod_cgroup_cpu_t *cpu)
{
    unsigned n = 0;
    if (cpu->quota_cpus > 0) {
        /* rounded up: 1.5 CPUs of quota keep two threads busy part of the time */
        n = cpu->quota_cpus >= (double)UINT_MAX ? UINT_MAX : (unsigned)cpu->quota_cpus;
        if ((double)n < cpu->quota_cpus && n < UINT_MAX)
            n++;
    }
    if (cpu->cpuset_cpus != 0 && (n == 0 || cpu->cpuset_cpus < n))
        n = cpu->cpuset_cpus;
    return n;
}
