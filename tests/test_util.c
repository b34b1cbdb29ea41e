/*
 * test_util.c — helpers shared by the test files (see test_util.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "tests/test_util.h"

const char *tu_shared_dir(void)
{
    const char *s = getenv("KVSERVE_SHARED");
    return s && *s ? s : "../shared";
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(fp, 0, SEEK_END) == 0) n = ftell(fp);
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0) buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}
