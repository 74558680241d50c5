/*
 * grpc.testing.BenchmarkService from Debian's grpc-proto, as gRPC's qps workers and ghz drive
 * it: each SimpleRequest asks for a SimpleResponse whose payload.body is `response_size` zero
 * bytes, or for a status (`response_status`, as the interop server echoes it).
 */
#ifndef ECHOD_BENCHMARK_H
#define ECHOD_BENCHMARK_H

#include "services/registry.h"

extern const echod_method_t *const echod_benchmark_methods[];

#endif
