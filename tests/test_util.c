/*
 * test_util.c — helpers shared by the test files (see test_util.h).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/test_util.h"

const char *tu_data_dir(void)
{
    const char *s = getenv("KVSERVE_DATA");
    return s && *s ? s : "tests/data";
}

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

void tu_write_mkmodel(const mkm_params *p, const char *tag, char *path, size_t n)
{
    const char *dir = getenv("TMPDIR");
    char err[256];
    snprintf(path, n, "%s/kvserve-%s-XXXXXX", dir && *dir ? dir : "/tmp", tag);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp %s", path);
    close(fd);
    cr_assert_eq(mkm_write(path, p, err, sizeof err), 0, "mkm_write: %s", err);
}
