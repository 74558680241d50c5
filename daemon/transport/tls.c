#include <stdio.h>
#include <openssl/err.h>
#include <h2o/socket.h>
#include "transport/tls.h"

/* h2o keeps a pointer to this list: it must outlive every SSL_CTX. */
static const h2o_iovec_t alpn_protocols[] = {{(char *)"h2", 2}, {NULL, 0}};

static void openssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_get_error();
    if (e == 0)
        snprintf(buf, len, "unknown error");
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
}

SSL_CTX *echod_tls_create(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
    char reason[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        openssl_reason(reason, sizeof(reason));
        snprintf(err, errlen, "TLS: %s", reason);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_path) != 1) {
        openssl_reason(reason, sizeof(reason));
        snprintf(err, errlen, "tls.cert: cannot use certificate \"%s\": %s", cert_path, reason);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1) {
        openssl_reason(reason, sizeof(reason));
        snprintf(err, errlen, "tls.key: cannot use private key \"%s\": %s", key_path, reason);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "tls.key: \"%s\" does not match the certificate \"%s\"", key_path, cert_path);
        goto fail;
    }
    h2o_ssl_register_alpn_protocols(ctx, alpn_protocols);
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}
