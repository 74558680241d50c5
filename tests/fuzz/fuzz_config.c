/*
 * libFuzzer: the config loader (daemon/config/config.c) on arbitrary YAML, then --set
 * overrides. Input: a YAML file, optionally followed by a line "--" and one override per line.
 * Whatever is accepted must dump to YAML that loads back to the very same config (the dump is
 * what --check-config prints and what the sha256 covers).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "config/config.h"

static int fd_in = -1, fd_dump = -1;
static char path_in[64], path_dump[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* files in memory: no disk I/O per input, and a path the loader opens like any other */
    fd_in = memfd_create("echod-fuzz-config", 0);
    fd_dump = memfd_create("echod-fuzz-dump", 0);
    if (fd_in < 0 || fd_dump < 0)
        abort();
    snprintf(path_in, sizeof(path_in), "/proc/self/fd/%d", fd_in);
    snprintf(path_dump, sizeof(path_dump), "/proc/self/fd/%d", fd_dump);
    return 0;
}

static void put(int fd, const void *p, size_t n)
{
    if (ftruncate(fd, 0) != 0 || pwrite(fd, p, n, 0) != (ssize_t)n)
        abort();
}

/* The config as echod_config_dump prints it, malloc'd. */
static char *dump(const echod_config_t *cfg, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    echod_config_dump(cfg, f);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sets = NULL;
    size_t yaml_len = size;
    for (size_t i = 0; i + 4 <= size; i++) {
        if ((i == 0 || data[i - 1] == '\n') && memcmp(data + i, "--\n", 3) == 0) {
            yaml_len = i;
            sets = data + i + 3;
            break;
        }
    }
    put(fd_in, data, yaml_len);

    echod_config_t cfg;
    char err[1024];
    err[0] = '\0';
    echod_config_init(&cfg);
    int rv = echod_config_load_file(&cfg, path_in, err, sizeof(err));
    for (const uint8_t *p = sets; rv == 0 && p != NULL && p < data + size;) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(data + size - p));
        size_t n = (size_t)((nl != NULL ? nl : data + size) - p);
        char *line = strndup((const char *)p, n);
        rv = echod_config_set(&cfg, line, err, sizeof(err));
        free(line);
        p += n + 1;
    }
    if (rv == 0)
        rv = echod_config_finish(&cfg, err, sizeof(err));
    if (rv != 0) {
        if (err[0] == '\0' || memchr(err, '\0', sizeof(err)) == NULL)
            abort(); /* an error must say something */
        echod_config_free(&cfg);
        return 0;
    }

    size_t len1, len2;
    char *first = dump(&cfg, &len1);
    put(fd_dump, first, len1);
    echod_config_t again;
    echod_config_init(&again);
    if (echod_config_load_file(&again, path_dump, err, sizeof(err)) != 0 ||
        echod_config_finish(&again, err, sizeof(err)) != 0) {
        fprintf(stderr, "the dump of an accepted config does not load: %s\n%s\n", err, first);
        abort();
    }
    char *second = dump(&again, &len2);
    if (len1 != len2 || memcmp(first, second, len1) != 0) {
        fprintf(stderr, "dump, load, dump differs:\n%s\n---\n%s\n", first, second);
        abort();
    }
    if (strcmp(cfg.sha256, again.sha256) != 0)
        abort();
    free(first);
    free(second);
    echod_config_free(&again);
    echod_config_free(&cfg);
    return 0;
}
