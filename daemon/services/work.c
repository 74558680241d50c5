#include <stdlib.h>
#include <string.h>
#include "echo.pb-c.h"
#include "dispatch/call.h"
#include "grpc/status.h"
#include "services/pb.h"
#include "services/work.h"
#include "util/err.h"
#include "work/burn.h"

int echod_work_run(echod_call_t *call)
{
    const echod_work_t *work = echod_call_work(call);
    echod_drawn_t d;
    echod_call_draw_work(call, &d);
    echod_burn_ns(d.cpu_us * 1000);
    echod_call_sleep(call, (uint32_t)d.sleep_us);
    if (work->error_rate > 0.0)
        return d.fail ? (work->status != 0 ? (int)work->status : ECHOD_INTERNAL) : 0;
    return (int)work->status;
}

echod_msg_t *echod_work_reshape_echo(echod_msg_t *req, int64_t response_bytes)
{
    Grpc__Examples__Echo__EchoRequest *in =
        grpc__examples__echo__echo_request__unpack(&echod_pb_allocator, req->len, echod_msg_payload(req));
    echod_msg_free(req);
    size_t want = (size_t)response_bytes, have = in != NULL ? strlen(in->message) : 0;
    char *text = echod_must(malloc(want + 1), "echod-response-bytes response"); /* capped by work.max_response_bytes */
    size_t keep = have < want ? have : want;
    /* never cut a UTF-8 sequence: back up to a lead byte, then pad */
    while (keep > 0 && keep < have && ((unsigned char)in->message[keep] & 0xC0) == 0x80)
        keep--;
    if (keep != 0)
        memcpy(text, in->message, keep);
    memset(text + keep, '.', want - keep);
    text[want] = '\0';
    if (in != NULL)
        grpc__examples__echo__echo_request__free_unpacked(in, &echod_pb_allocator);
    Grpc__Examples__Echo__EchoResponse resp = GRPC__EXAMPLES__ECHO__ECHO_RESPONSE__INIT;
    resp.message = text;
    size_t size = grpc__examples__echo__echo_response__get_packed_size(&resp);
    echod_msg_t *out = echod_msg_new((uint32_t)size);
    grpc__examples__echo__echo_response__pack(&resp, echod_msg_payload(out));
    free(text);
    return out;
}
