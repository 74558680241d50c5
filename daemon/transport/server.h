/*
 * What every loop shares: the config, the methods, the dispatcher and the TLS context. Built by
 * main before the loops start and read-only while they run (each loop keeps its own drain state).
 */
#ifndef ECHOD_SERVER_H
#define ECHOD_SERVER_H

#include <stdatomic.h>
#include <openssl/ssl.h>
#include "config/config.h"
#include "dispatch/dispatcher.h"
#include "services/registry.h"

typedef struct echod_server {
    const echod_config_t *cfg;
    echod_registry_t registry;
    echod_dispatcher_t dispatcher;
    SSL_CTX *ssl_ctx; /* NULL: cleartext h2c with prior knowledge */
} echod_server_t;

#endif
