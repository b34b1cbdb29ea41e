/*
 * test_util.h — small helpers shared by the test files: where the shared test data lives and
 * reading a whole file. (No tests here; tests/test_util.c is linked into the test binary.)
 */
#ifndef KVSERVE_TEST_UTIL_H
#define KVSERVE_TEST_UTIL_H

#include <stddef.h>

/* The shared data folder: $KVSERVE_SHARED when set and non-empty, else "../shared". */
const char *tu_shared_dir(void);

/* Reads a whole file into a malloc'd, NUL-terminated buffer (the caller frees it) and stores its
 * length in *len when len is not NULL. NULL when the file cannot be opened or read. */
char *tu_read_file(const char *path, size_t *len);

#endif
