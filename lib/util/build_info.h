/* build_info.h — which dtrun this is: its version and the git commit it was
 * built from (the Makefile writes it; "unknown" outside a git checkout, with
 * "-dirty" when the tree had uncommitted changes). */
#ifndef DTRUN_BUILD_INFO_H
#define DTRUN_BUILD_INFO_H

const char *dtrun_version(void);
const char *dtrun_commit(void);

#endif
