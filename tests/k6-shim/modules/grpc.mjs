// k6/net/grpc (see ../lib/grpc.js)
import { createRequire } from 'node:module';

const g = createRequire(import.meta.url)('../lib/grpc.js');

export const Client = g.Client;
export const Stream = g.Stream;
export const {
  StatusOK, StatusCanceled, StatusUnknown, StatusInvalidArgument, StatusDeadlineExceeded,
  StatusNotFound, StatusAlreadyExists, StatusPermissionDenied, StatusResourceExhausted,
  StatusFailedPrecondition, StatusAborted, StatusOutOfRange, StatusUnimplemented, StatusInternal,
  StatusUnavailable, StatusDataLoss, StatusUnauthenticated,
} = g.StatusCodes;
export default { Client, Stream, ...g.StatusCodes };
