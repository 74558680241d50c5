/*
 * The ramp stage: a name that POST /admin/mark?stage=NAME sets, and an echod-stage request header
 * changes, with when it was marked and how many marks there were. /metrics shows it
 * (echod_stage_info{stage}, echod_stage_started_timestamp_seconds, echod_stage_marks_total) so
 * scrapes can be cut at stage boundaries.
 *
 * Process-wide, under a mutex: written rarely (a mark per ramp stage), read by scrapes. Any thread.
 */
#ifndef ECHOD_STAGE_H
#define ECHOD_STAGE_H

#include <stddef.h>
#include <stdint.h>

/* A stage name is 1-100 characters of [A-Za-z0-9._:-]: it goes into a Prometheus label as it is. */
#define ECHOD_STAGE_NAME_MAX 100

typedef struct {
    char name[ECHOD_STAGE_NAME_MAX + 1]; /* "" until the first mark */
    double started;                      /* Unix time of the last mark; 0 before */
    uint64_t marks;
} echod_stage_t;

int echod_stage_name_ok(const char *name, size_t len);

/* POST /admin/mark?stage=NAME (a valid name): a mark even when the name is unchanged. */
void echod_stage_mark(const char *name);

/* An echod-stage request header: the stage becomes `name` if that is a valid name and not the
 * current one (every call carries it; only a change is a mark). `seen` (cap bytes, at least
 * ECHOD_STAGE_NAME_MAX + 1) is the calling thread's copy of the last value it saw, which keeps the
 * lock off the path until the name changes. The thread that owns `seen`. */
void echod_stage_header(char *seen, size_t cap, const char *name, size_t len);

/* The stage as one consistent copy (name, start and marks of the same mark). */
void echod_stage_read(echod_stage_t *out);

#endif
