/*
 * grpc-encoding: the names gzip, deflate and identity, and the per-call codec that inflates
 * compressed request messages and compresses responses with zlib.
 *
 * gzip is RFC 1952 and gRPC's deflate is the zlib format of RFC 1950 (as grpc-java's and
 * grpc-go's codecs write it), both through zlib's inflate/deflate.
 *
 * Threading: a codec belongs to one call and is used inside that call's steps only (steps of a
 * call never run concurrently, and the serializer orders them), so it needs no lock. It is
 * created lazily by the first message that needs it: an identity call never has one.
 * The name helpers are pure and callable on any thread.
 */
#ifndef ECHOD_CODEC_H
#define ECHOD_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include "config/config.h"
#include "grpc/deframe.h"
#include "grpc/encoding.h"

/* What every response advertises in grpc-accept-encoding. */
#define ECHOD_ACCEPT_ENCODING "identity,deflate,gzip"

/* "identity", "gzip", "deflate". */
const char *echod_encoding_name(echod_encoding_t enc);

/* One encoding name, exactly (gRPC names are case-sensitive). Returns 0, or -1 for anything
 * else, including a list such as "gzip,deflate": grpc-encoding names one encoding. */
int echod_encoding_parse(const char *value, size_t len, echod_encoding_t *out);

/* The encodings a grpc-accept-encoding list names, as a set: bit (1u << enc). Tokens are
 * comma-separated with optional spaces; unknown tokens are ignored. */
unsigned echod_encoding_accept_parse(const char *value, size_t len);

/* The response's encoding under transport.compression.respond: the request's (`request`) or a
 * fixed one, used only when the client's grpc-accept-encoding set lists it (as grpc-java's and
 * grpc-go's servers decide), else identity. */
echod_encoding_t echod_encoding_respond(echod_compression_respond_t respond, echod_encoding_t request, unsigned accept);

/* A short description of a status, for grpc-message. */
const char *echod_inflate_status_str(echod_inflate_status_t st);

typedef struct echod_codec echod_codec_t;

/* inflate_enc: the request's grpc-encoding; deflate_enc: the response's. level: zlib's 1..9.
 * Running out of memory here, or in zlib, aborts (util/err.h). */
echod_codec_t *echod_codec_new(echod_encoding_t inflate_enc, echod_encoding_t deflate_enc, int level);
/* NULL is a no-op. */
void echod_codec_free(echod_codec_t *codec);

/*
 * Inflates the payload of `in` (a message whose compressed flag is set) into a new message of
 * at most `max` payload bytes, flag 0, stored in *out. The cap is enforced while inflating: no
 * more than max bytes (plus a one-byte probe) are ever produced or allocated, whatever the
 * compressed stream claims. `in` stays the caller's. On error *out is NULL.
 */
echod_inflate_status_t echod_codec_inflate(echod_codec_t *codec, const echod_msg_t *in, uint32_t max,
                                           echod_msg_t **out);

/* The payload of `in` compressed with the codec's response encoding, as a new message with the
 * compressed flag set; `in` stays the caller's. NULL if it cannot be one message (over 4 GiB
 * bound) or zlib fails to finish (a zlib bug): the caller sends it uncompressed. */
echod_msg_t *echod_codec_deflate(echod_codec_t *codec, const echod_msg_t *in);

#endif
