/* comm_nccl_lib.c — libnccl, loaded with dlopen when a communicator first
 * wants it.
 *
 * Why not link it? libnccl.so.2 is 218 MB, and bin/dtrun is also the
 * launcher, the dry-run and every CLI call, none of which talk NCCL; linked,
 * the binary would also refuse to start wherever libnccl is missing (a GPU
 * box whose NCCL comes only with PyTorch's wheels), where a CPU-transport run
 * is still possible. So, as kernels/cuda/blas.cu does for cuBLAS, the few
 * entry points are resolved on first use. Search order: DTRUN_NCCL_LIB (a
 * path), then libnccl.so.<major of the headers> and libnccl.so through the
 * executable's rpath (NCCL_HOME/lib or the toolkit's lib64, Makefile) and the
 * loader's default path. */
#ifdef DTRUN_CUDA

#include "runtime/comm/comm_nccl_lib.h"
#include "runtime/env.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_nccl_api dt_nccl;

#define DT_STR_(x) #x
#define DT_STR(x) DT_STR_(x)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];

/* dlsym answers a void *; copying its bytes into the function pointer is the
 * conversion POSIX guarantees (ISO C has none between the two kinds). */
#define RESOLVE(field, sym)                                                            \
    do {                                                                               \
        void *p_ = dlsym(lib, sym);                                                    \
        if (!p_) {                                                                     \
            snprintf(load_error, sizeof load_error, "%.200s has no %s", name, sym);        \
            return;                                                                    \
        }                                                                              \
        memcpy(&dt_nccl.field, &p_, sizeof p_);                                        \
    } while (0)

static void load(void)
{
    const char *name = dt_env_get()->nccl_lib;
    void *lib = NULL;
    if (name && *name) {
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    } else {
        name = "libnccl.so." DT_STR(NCCL_MAJOR);
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            name = "libnccl.so";
            lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!lib) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "cannot load NCCL (%.200s): %.250s", name,
                 why ? why : "not found");
        return;
    }
    RESOLVE(get_version, "ncclGetVersion");
    RESOLVE(get_unique_id, "ncclGetUniqueId");
    RESOLVE(comm_init_rank_config, "ncclCommInitRankConfig");
    RESOLVE(comm_finalize, "ncclCommFinalize");
    RESOLVE(comm_destroy, "ncclCommDestroy");
    RESOLVE(comm_abort, "ncclCommAbort");
    RESOLVE(comm_get_async_error, "ncclCommGetAsyncError");
    RESOLVE(get_error_string, "ncclGetErrorString");
    RESOLVE(get_last_error, "ncclGetLastError");
    RESOLVE(all_reduce, "ncclAllReduce");
    RESOLVE(reduce_scatter, "ncclReduceScatter");
    RESOLVE(all_gather, "ncclAllGather");
    RESOLVE(broadcast, "ncclBroadcast");
    RESOLVE(reduce, "ncclReduce");
    RESOLVE(send, "ncclSend");
    RESOLVE(recv, "ncclRecv");
    RESOLVE(group_start, "ncclGroupStart");
    RESOLVE(group_end, "ncclGroupEnd");
    void *revoke = dlsym(lib, "ncclCommRevoke");  /* optional */
    memcpy(&dt_nccl.comm_revoke, &revoke, sizeof revoke);
    int v = 0;
    if (dt_nccl.get_version(&v) != ncclSuccess || v < DT_NCCL_MIN_VERSION) {
        snprintf(load_error, sizeof load_error,
                 "%.200s is NCCL version code %d; dtrun needs %d (2.18) or newer", name, v,
                 DT_NCCL_MIN_VERSION);
        return;
    }
    /* kept mapped for the life of the process, like cuBLAS: NCCL's own
     * threads may outlive any communicator */
    dt_nccl.version = v;
    dt_nccl.loaded = 1;
}

int dt_nccl_load(char *why, size_t whylen)
{
    pthread_once(&load_once, load);
    if (dt_nccl.loaded)
        return 0;
    if (why && whylen)
        snprintf(why, whylen, "%s", load_error);
    return -1;
}

#else
/* A CPU-only build has no NCCL: nothing here (comm_nccl.c answers "not built"). */
typedef int dt_nccl_lib_unused;
#endif
