/* build_info.c — see build_info.h. The Makefile defines DTRUN_GIT_COMMIT for
 * this file only, from a stamp it rewrites only when the commit changes. */
#include "lib/util/build_info.h"

#ifndef DTRUN_GIT_COMMIT
#define DTRUN_GIT_COMMIT "unknown"
#endif

const char *dtrun_version(void) { return "0.1.0"; }
const char *dtrun_commit(void) { return DTRUN_GIT_COMMIT[0] ? DTRUN_GIT_COMMIT : "unknown"; }
