/*
 * version.c — the release and the commit of this build (base/version.h). The Makefile passes
 * KVSERVE_VERSION and KVSERVE_COMMIT to this file alone and rebuilds it when the commit changes.
 */
#include "base/version.h"

#ifndef KVSERVE_VERSION
#define KVSERVE_VERSION "0.0.0"
#endif
#ifndef KVSERVE_COMMIT
#define KVSERVE_COMMIT "unknown"
#endif

const char *version_string(void)
{
    return KVSERVE_VERSION;
}

const char *version_commit(void)
{
    return KVSERVE_COMMIT;
}
