/*
 * version.h — what this build is: the release (the file VERSION) and the commit it was built
 * from, compiled into base/version.c alone (the Makefile passes both; see its "version" part).
 * Read by `kvserve --version` (cli/version.c), the server's start-up line and GET /version.
 */
#ifndef KVSERVE_BASE_VERSION_H
#define KVSERVE_BASE_VERSION_H

/* The release, e.g. "0.1.0" (static storage). */
const char *version_string(void);

/* The commit: git's short hash ("-dirty" with uncommitted changes), the one `git archive` wrote
 * for a release tarball, or "unknown" (static storage). */
const char *version_commit(void);

#endif
