#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "descriptor_set.h"
#include "dispatch/call.h"
#include "services/adapters.h"
#include "services/pb.h"
#include "reflection.pb-c.h"
#include "services/reflection.h"
#include "util/log.h"
#include "util/err.h"

/*
 * v1alpha is v1 under another package name: the same messages with the same field numbers, so
 * the v1 code reads and writes both.
 */
typedef Grpc__Reflection__V1__ServerReflectionRequest request_t;
typedef Grpc__Reflection__V1__ServerReflectionResponse response_t;
#define REQ(x)  GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_##x
#define RESP(x) GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_##x

/* --- the descriptor set, split into files, and an index of the symbols they define --- */

typedef enum { SYM_MESSAGE, SYM_ENUM, SYM_SERVICE, SYM_METHOD } symbol_kind_t;

typedef struct {
    char *name;
    const uint8_t *data; /* the serialized FileDescriptorProto, inside echod_descriptor_set */
    size_t len;
    size_t *deps; /* indexes into files */
    size_t ndeps;
} file_t;

typedef struct {
    char *name; /* fully qualified, without the leading dot */
    symbol_kind_t kind;
    size_t file;
} symbol_t;

/* Built once (pthread_once) by the first reflection call, read-only afterwards, never freed. */
static struct {
    file_t *files;
    size_t nfiles;
    symbol_t *symbols;
    size_t nsymbols, cap;
} db;
static pthread_once_t db_once = PTHREAD_ONCE_INIT;

/* Length-delimited fields only: descriptors keep every name and sub-message in one. */
typedef struct {
    const uint8_t *p, *end;
} pb_reader_t;

static int read_varint(pb_reader_t *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p == r->end)
            return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* 1 with the next length-delimited field, 0 at the end, -1 on malformed input. */
static int pb_next(pb_reader_t *r, uint32_t *field, const uint8_t **data, size_t *len)
{
    while (r->p != r->end) {
        uint64_t key, v;
        if (read_varint(r, &key) != 0)
            return -1;
        switch (key & 7) {
        case 0:
            if (read_varint(r, &v) != 0)
                return -1;
            break;
        case 1:
            if (r->end - r->p < 8)
                return -1;
            r->p += 8;
            break;
        case 2:
            if (read_varint(r, &v) != 0 || v > (uint64_t)(r->end - r->p))
                return -1;
            *field = (uint32_t)(key >> 3);
            *data = r->p;
            *len = (size_t)v;
            r->p += v;
            return 1;
        case 5:
            if (r->end - r->p < 4)
                return -1;
            r->p += 4;
            break;
        default:
            return -1; /* descriptor.proto has no groups */
        }
    }
    return 0;
}

/* The first field `want` of a message, as a string; "" when absent. */
static int pb_string(const uint8_t *msg, size_t msglen, uint32_t want, const uint8_t **s, size_t *slen)
{
    pb_reader_t r = {msg, msg + msglen};
    uint32_t field;
    int rv;
    *s = (const uint8_t *)"";
    *slen = 0;
    while ((rv = pb_next(&r, &field, s, slen)) == 1)
        if (field == want)
            return 0;
    *s = (const uint8_t *)"";
    *slen = 0;
    return rv;
}

static char *join_name(const char *prefix, const uint8_t *name, size_t len)
{
    size_t plen = strlen(prefix);
    char *s = echod_must(malloc(plen + 1 + len + 1), "reflection symbol");
    memcpy(s, prefix, plen);
    size_t at = plen;
    if (plen != 0)
        s[at++] = '.';
    memcpy(s + at, name, len);
    s[at + len] = '\0';
    return s;
}

static char *add_symbol(const char *prefix, const uint8_t *name, size_t len, symbol_kind_t kind, size_t file)
{
    if (db.nsymbols == db.cap) {
        db.cap = db.cap == 0 ? 64 : db.cap * 2;
        db.symbols = echod_must(realloc(db.symbols, db.cap * sizeof(*db.symbols)), "reflection symbols");
    }
    char *full = join_name(prefix, name, len);
    db.symbols[db.nsymbols++] = (symbol_t){.name = full, .kind = kind, .file = file};
    return full;
}

/* DescriptorProto: its name, then nested_type (3) and enum_type (4) under it. */
static int index_message(const char *prefix, const uint8_t *msg, size_t len, size_t file)
{
    const uint8_t *name, *data;
    size_t nlen, dlen;
    uint32_t field;
    if (pb_string(msg, len, 1, &name, &nlen) < 0)
        return -1;
    const char *full = add_symbol(prefix, name, nlen, SYM_MESSAGE, file);
    pb_reader_t r = {msg, msg + len};
    int rv;
    while ((rv = pb_next(&r, &field, &data, &dlen)) == 1) {
        if (field == 3 && index_message(full, data, dlen, file) != 0)
            return -1;
        if (field == 4) {
            if (pb_string(data, dlen, 1, &name, &nlen) < 0)
                return -1;
            add_symbol(full, name, nlen, SYM_ENUM, file);
        }
    }
    return rv;
}

/* ServiceDescriptorProto: the service, and each method (2) as pkg.Service.Method. */
static int index_service(const char *prefix, const uint8_t *svc, size_t len, size_t file)
{
    const uint8_t *name, *data;
    size_t nlen, dlen;
    uint32_t field;
    if (pb_string(svc, len, 1, &name, &nlen) < 0)
        return -1;
    const char *full = add_symbol(prefix, name, nlen, SYM_SERVICE, file);
    pb_reader_t r = {svc, svc + len};
    int rv;
    while ((rv = pb_next(&r, &field, &data, &dlen)) == 1) {
        if (field == 2) {
            if (pb_string(data, dlen, 1, &name, &nlen) < 0)
                return -1;
            add_symbol(full, name, nlen, SYM_METHOD, file);
        }
    }
    return rv;
}

static ssize_t find_file(const uint8_t *name, size_t len)
{
    for (size_t i = 0; i != db.nfiles; i++)
        if (strlen(db.files[i].name) == len && memcmp(db.files[i].name, name, len) == 0)
            return (ssize_t)i;
    return -1;
}

/* FileDescriptorProto: dependency (3) by name, and the package-qualified top-level symbols. */
static int index_file(size_t f)
{
    file_t *file = &db.files[f];
    const uint8_t *pkg, *data;
    size_t pkglen, dlen;
    uint32_t field;
    if (pb_string(file->data, file->len, 2, &pkg, &pkglen) < 0)
        return -1;
    char *prefix = join_name("", pkg, pkglen);
    pb_reader_t r = {file->data, file->data + file->len};
    int rv;
    while ((rv = pb_next(&r, &field, &data, &dlen)) == 1) {
        const uint8_t *name;
        size_t nlen;
        switch (field) {
        case 3: {
            /* --include_imports put every import in the set; anything else is a build bug */
            ssize_t dep = find_file(data, dlen);
            if (dep < 0) {
                echod_error("reflection: %s imports %.*s, which is not in the descriptor set", file->name, (int)dlen,
                            (const char *)data);
                rv = -1;
                goto out;
            }
            file->deps = echod_must(realloc(file->deps, (file->ndeps + 1) * sizeof(*file->deps)), "reflection deps");
            file->deps[file->ndeps++] = (size_t)dep;
            break;
        }
        case 4:
            if (index_message(prefix, data, dlen, f) != 0)
                rv = -1;
            break;
        case 5:
            if (pb_string(data, dlen, 1, &name, &nlen) < 0)
                rv = -1;
            else
                add_symbol(prefix, name, nlen, SYM_ENUM, f);
            break;
        case 6:
            if (index_service(prefix, data, dlen, f) != 0)
                rv = -1;
            break;
        }
        if (rv < 0)
            break;
    }
out:
    free(prefix);
    return rv;
}

static int symbol_cmp(const void *a, const void *b)
{
    return strcmp(((const symbol_t *)a)->name, ((const symbol_t *)b)->name);
}

static void build_db(void)
{
    const uint8_t *data;
    size_t len;
    uint32_t field;
    pb_reader_t r = {echod_descriptor_set, echod_descriptor_set + echod_descriptor_set_len};
    int rv;
    /* FileDescriptorSet.file (1), each a FileDescriptorProto whose name is field 1 */
    while ((rv = pb_next(&r, &field, &data, &len)) == 1) {
        if (field != 1)
            continue;
        const uint8_t *name;
        size_t nlen;
        if (pb_string(data, len, 1, &name, &nlen) < 0) {
            rv = -1;
            break;
        }
        db.files = echod_must(realloc(db.files, (db.nfiles + 1) * sizeof(*db.files)), "reflection files");
        db.files[db.nfiles++] = (file_t){.name = join_name("", name, nlen), .data = data, .len = len};
    }
    /* dependencies are resolved once every file is known: protoc lists them first, but says not */
    for (size_t f = 0; rv == 0 && f != db.nfiles; f++)
        rv = index_file(f);
    if (rv != 0) {
        echod_error("reflection: the embedded descriptor set is malformed; reflection answers NOT_FOUND");
        db.nsymbols = 0;
        db.nfiles = 0;
        return;
    }
    qsort(db.symbols, db.nsymbols, sizeof(*db.symbols), symbol_cmp);
}

static const symbol_t *find_symbol(const char *name)
{
    symbol_t key = {.name = (char *)name};
    return bsearch(&key, db.symbols, db.nsymbols, sizeof(*db.symbols), symbol_cmp);
}

/* --- answers --- */

static echod_msg_t *pack_response(const response_t *resp)
{
    size_t size = grpc__reflection__v1__server_reflection_response__get_packed_size(resp);
    echod_msg_t *out = echod_msg_new((uint32_t)size);
    grpc__reflection__v1__server_reflection_response__pack(resp, echod_msg_payload(out));
    return out;
}

static echod_msg_t *error_response(response_t *resp, int code, const char *what, const char *name)
{
    char text[256];
    snprintf(text, sizeof(text), "%s not found: %.200s", what, name);
    Grpc__Reflection__V1__ErrorResponse err = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    err.error_code = code;
    err.error_message = text;
    resp->message_response_case = RESP(ERROR_RESPONSE);
    resp->error_response = &err;
    return pack_response(resp);
}

/* The file first, then every file it depends on, transitively, each once (breadth first). */
static echod_msg_t *files_response(response_t *resp, size_t root)
{
    size_t *order = echod_must(malloc(db.nfiles * sizeof(*order)), "reflection file order");
    uint8_t *seen = echod_must(calloc(db.nfiles, 1), "reflection file order");
    ProtobufCBinaryData *blobs = echod_must(malloc(db.nfiles * sizeof(*blobs)), "reflection file order");
    size_t n = 0;
    order[n++] = root;
    seen[root] = 1;
    for (size_t i = 0; i != n; i++) {
        const file_t *f = &db.files[order[i]];
        for (size_t d = 0; d != f->ndeps; d++) {
            if (!seen[f->deps[d]]) {
                seen[f->deps[d]] = 1;
                order[n++] = f->deps[d];
            }
        }
    }
    for (size_t i = 0; i != n; i++)
        blobs[i] = (ProtobufCBinaryData){.len = db.files[order[i]].len, .data = (uint8_t *)db.files[order[i]].data};
    Grpc__Reflection__V1__FileDescriptorResponse fdr = GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    fdr.n_file_descriptor_proto = n;
    fdr.file_descriptor_proto = blobs;
    resp->message_response_case = RESP(FILE_DESCRIPTOR_RESPONSE);
    resp->file_descriptor_response = &fdr;
    echod_msg_t *out = pack_response(resp);
    free(blobs);
    free(seen);
    free(order);
    return out;
}

/* Every service echod serves, from the registry, so a service is listed only if it is routed. */
static echod_msg_t *services_response(response_t *resp, const echod_registry_t *reg)
{
    /* the registry is never empty (echod serves Echo and Health): calloc(0) may be NULL */
    Grpc__Reflection__V1__ServiceResponse *items =
        echod_must(calloc(reg->count, sizeof(*items)), "reflection services");
    Grpc__Reflection__V1__ServiceResponse **ptrs = echod_must(calloc(reg->count, sizeof(*ptrs)), "reflection services");
    size_t n = 0;
    for (size_t i = 0; i != reg->count; i++) {
        const char *svc = reg->methods[i]->service;
        size_t k = 0;
        while (k != n && strcmp(items[k].name, svc) != 0)
            k++;
        if (k != n)
            continue;
        grpc__reflection__v1__service_response__init(&items[n]);
        items[n].name = (char *)svc;
        ptrs[n] = &items[n];
        n++;
    }
    Grpc__Reflection__V1__ListServiceResponse list = GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    list.n_service = n;
    list.service = ptrs;
    resp->message_response_case = RESP(LIST_SERVICES_RESPONSE);
    resp->list_services_response = &list;
    echod_msg_t *out = pack_response(resp);
    free(ptrs);
    free(items);
    return out;
}

/* grpc-java's answers: errors travel in error_response and the stream goes on. */
static echod_msg_t *answer(const echod_registry_t *reg, request_t *req)
{
    response_t resp = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    resp.valid_host = req->host;
    resp.original_request = req;
    switch (req->message_request_case) {
    case REQ(FILE_BY_FILENAME): {
        ssize_t f = find_file((const uint8_t *)req->file_by_filename, strlen(req->file_by_filename));
        if (f < 0)
            return error_response(&resp, ECHOD_NOT_FOUND, "file", req->file_by_filename);
        return files_response(&resp, (size_t)f);
    }
    case REQ(FILE_CONTAINING_SYMBOL): {
        const symbol_t *s = find_symbol(req->file_containing_symbol);
        if (s == NULL)
            return error_response(&resp, ECHOD_NOT_FOUND, "symbol", req->file_containing_symbol);
        return files_response(&resp, s->file);
    }
    case REQ(FILE_CONTAINING_EXTENSION):
        /* the served files are proto3 and declare no extensions */
        return error_response(&resp, ECHOD_NOT_FOUND, "extension of", req->file_containing_extension->containing_type);
    case REQ(ALL_EXTENSION_NUMBERS_OF_TYPE): {
        const symbol_t *s = find_symbol(req->all_extension_numbers_of_type);
        if (s == NULL || s->kind != SYM_MESSAGE)
            return error_response(&resp, ECHOD_NOT_FOUND, "type", req->all_extension_numbers_of_type);
        Grpc__Reflection__V1__ExtensionNumberResponse ext = GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
        ext.base_type_name = s->name;
        resp.message_response_case = RESP(ALL_EXTENSION_NUMBERS_RESPONSE);
        resp.all_extension_numbers_response = &ext;
        return pack_response(&resp);
    }
    case REQ(LIST_SERVICES):
        return services_response(&resp, reg);
    default: {
        Grpc__Reflection__V1__ErrorResponse err = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
        err.error_code = ECHOD_UNIMPLEMENTED;
        err.error_message = "no request in ServerReflectionRequest";
        resp.message_response_case = RESP(ERROR_RESPONSE);
        resp.error_response = &err;
        return pack_response(&resp);
    }
    }
}

/* --- ServerReflectionInfo: bidi, one response per request --- */

static void info_start(echod_call_t *call)
{
    (void)call;
    pthread_once(&db_once, build_db);
}

static echod_msg_t *info_reply(echod_call_t *call, echod_msg_t *msg)
{
    request_t *req =
        grpc__reflection__v1__server_reflection_request__unpack(&echod_pb_allocator, msg->len, echod_msg_payload(msg));
    echod_msg_free(msg);
    if (req == NULL) {
        echod_call_close(call, ECHOD_INTERNAL, "Invalid protobuf byte sequence");
        return NULL;
    }
    echod_msg_t *out = answer(echod_call_registry(call), req);
    grpc__reflection__v1__server_reflection_request__free_unpacked(req, &echod_pb_allocator);
    return out;
}

static const echod_bidi_handler_t info_handler = {.start = info_start, .reply = info_reply};

/* one method per block */
/* clang-format off */
#define V1      "grpc.reflection.v1.ServerReflection"
#define V1ALPHA "grpc.reflection.v1alpha.ServerReflection"

static const echod_method_t info_v1 = {
    ECHOD_METHOD(V1, ServerReflectionInfo), .type = ECHOD_GRPC_BIDI_STREAM, ECHOD_BIDI_HOLD_ONE(info_handler)};
static const echod_method_t info_v1alpha = {
    ECHOD_METHOD(V1ALPHA, ServerReflectionInfo), .type = ECHOD_GRPC_BIDI_STREAM, ECHOD_BIDI_HOLD_ONE(info_handler)};
/* clang-format on */

const echod_method_t *const echod_reflection_methods[] = {&info_v1, &info_v1alpha, NULL};
