#include <ctype.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include "admin/stage.h"

static pthread_mutex_t stage_mutex = PTHREAD_MUTEX_INITIALIZER;
static echod_stage_t stage; /* under stage_mutex */

int echod_stage_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > ECHOD_STAGE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)name[i]) && strchr("._:-", name[i]) == NULL)
            return 0;
    return 1;
}

/* `always`: a mark even when the name is the current one (POST /admin/mark restarts a stage). */
static void set_stage(const char *name, size_t len, int always)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&stage_mutex);
    if (always || strlen(stage.name) != len || memcmp(stage.name, name, len) != 0) {
        memcpy(stage.name, name, len);
        stage.name[len] = '\0';
        stage.started = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
        stage.marks++;
    }
    pthread_mutex_unlock(&stage_mutex);
}

void echod_stage_mark(const char *name)
{
    set_stage(name, strlen(name), 1);
}

void echod_stage_header(char *seen, size_t cap, const char *name, size_t len)
{
    if (len == 0 || len >= cap || (len == strlen(seen) && memcmp(seen, name, len) == 0))
        return;
    memcpy(seen, name, len);
    seen[len] = '\0';
    if (echod_stage_name_ok(seen, len))
        set_stage(seen, len, 0);
}

void echod_stage_read(echod_stage_t *out)
{
    pthread_mutex_lock(&stage_mutex);
    *out = stage;
    pthread_mutex_unlock(&stage_mutex);
}
