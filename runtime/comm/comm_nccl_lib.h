/* comm_nccl_lib.h — NCCL's entry points, resolved at run time (comm_nccl_lib.c).
 * Only for CUDA builds (DTRUN_CUDA): nccl.h gives the types, never the link.
 * Private to runtime/comm. */
#ifndef DTRUN_COMM_NCCL_LIB_H
#define DTRUN_COMM_NCCL_LIB_H

#include <stddef.h>

#include <nccl.h>

/* The oldest NCCL whose API this backend uses: non-blocking communicators and
 * ncclCommFinalize (2.14), ncclBfloat16 / ncclAvg (2.10), and the config
 * struct versioning that lets an older library read our (2.28) ncclConfig_t. */
#define DT_NCCL_MIN_VERSION 21800

typedef struct {
    int loaded;
    int version;                 /* ncclGetVersion's code, e.g. 22809 */
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*comm_finalize)(ncclComm_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    /* 2.28 and newer, else NULL: stops a communicator's kernels without
     * freeing anything (abort_all revokes every communicator first) */
    ncclResult_t (*comm_revoke)(ncclComm_t, int);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    const char *(*get_error_string)(ncclResult_t);
    const char *(*get_last_error)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                   ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int,
                           ncclComm_t, cudaStream_t);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
} dt_nccl_api;

extern dt_nccl_api dt_nccl;

/* Loads libnccl once (thread-safe); 0, or -1 with one line in why (not found,
 * a symbol missing, older than DT_NCCL_MIN_VERSION). The answer is cached. */
int dt_nccl_load(char *why, size_t whylen);

#endif
