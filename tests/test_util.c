/*
 * test_util.c — helpers shared by the test files (see test_util.h).
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/dtype.h"
#include "base/rng.h"
#include "cpu/cpu.h"
#include "cpu/internal.h"
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

uint64_t tu_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

uint64_t tu_seed(uint64_t fallback)
{
    const char *e = getenv("KVSERVE_TEST_SEED");
    return e && *e ? strtoull(e, NULL, 0) : fallback;
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

char *tu_capture(const char *cmd, int *status)
{
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f, "popen %s", cmd);
    size_t n = 0, cap = 4096;
    char *s = malloc(cap);
    cr_assert_not_null(s);
    for (size_t k; (k = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (cap - n < 2) {
            s = realloc(s, cap *= 2);
            cr_assert_not_null(s);
        }
    }
    s[n] = 0;
    *status = pclose(f);
    return s;
}

void tu_mkdtemp(const char *tag, char *path, size_t n)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, n, "%s/kvserve-%s-XXXXXX", dir && *dir ? dir : "/tmp", tag);
    cr_assert_not_null(mkdtemp(path), "mkdtemp %s", path);
}

static int tu__rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

void tu_rm_rf(const char *path)
{
    nftw(path, tu__rm_one, 16, FTW_DEPTH | FTW_PHYS);
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

void tu_random_blocks(int type, int64_t n_blocks, uint64_t *rng, void *dst)
{
    size_t bb = dt_block_bytes(type);
    uint8_t *p = dst;
    for (size_t i = 0; i < bb * (size_t)n_blocks; i += 8) {
        uint64_t r = rng_splitmix64(rng);
        for (size_t k = 0; k < 8 && i + k < bb * (size_t)n_blocks; k++) p[i + k] = (uint8_t)(r >> (8 * k));
    }
    tu_random_block_scales(type, n_blocks, rng, dst);
}

void tu_random_block_scales(int type, int64_t n_blocks, uint64_t *rng, void *dst)
{
    size_t bb = dt_block_bytes(type);
    uint8_t *p = dst;
    int off[2], n16 = dt_f16_fields(type, off);
    for (int64_t b = 0; type == DT_MXFP4 && b < n_blocks; b++) /* E8M0 2^-12 .. 2^-4, as the f16 scales */
        p[(size_t)b * bb] = (uint8_t)(116 + rng_splitmix64(rng) % 9);
    for (int64_t b = 0; b < n_blocks; b++)
        for (int k = 0; k < n16; k++) {
            uint64_t r = rng_splitmix64(rng);
            /* exponent field 3..11 (2^-12 .. 2^-4), any mantissa, any sign */
            uint16_t h = (uint16_t)((r & 0x8000) | (3 + (r >> 16) % 9) << 10 | ((r >> 32) & 0x3FF));
            memcpy(p + (size_t)b * bb + off[k], &h, 2);
        }
}

int tu_cpu_levels(tu_cpu_level *out)
{
    int n = 0;
    unsigned feats = cpu_isa_features();
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_supported(isa)) continue;
        unsigned own = isa == CPU_ISA_AVX512 ? feats & (CPU_FEAT_VNNI | CPU_FEAT_BF16)
                       : isa == CPU_ISA_NEON ? feats & CPU_FEAT_DOTPROD : 0;
        if (own) { /* the level without its sub-features first */
            out[n] = (tu_cpu_level){.isa = isa, .features = 0};
            snprintf(out[n].name, sizeof out[n].name, "%s", cpu_isa_name(isa));
            n++;
        }
        out[n] = (tu_cpu_level){.isa = isa, .features = own};
        snprintf(out[n].name, sizeof out[n].name, "%s%s%s%s", cpu_isa_name(isa),
                 own & CPU_FEAT_VNNI ? "+vnni" : "", own & CPU_FEAT_BF16 ? "+bf16" : "",
                 own & CPU_FEAT_DOTPROD ? "+dotprod" : "");
        n++;
    }
    return n;
}

backend *tu_cpu_backend(const tu_cpu_level *l, int n_threads)
{
    backend *be = cpu__backend_create(n_threads, l->isa, l->features);
    cr_assert_not_null(be, "cannot create a CPU backend at level %s", l->name);
    return be;
}

/* ---- skipped tests, visible --------------------------------------------------------------- */

/* Criterion lists skipped tests only with --verbose, so a run that skipped a third of its tests
 * for want of ../shared or a GPU looked like a clean pass. Every skip is printed with its reason,
 * and the run's last line counts them. (The runner process calls these.) */
static size_t tu_n_skipped;

ReportHook(POST_TEST)(struct criterion_test_stats *st)
{
    if (st->test_status != CR_STATUS_SKIPPED) return;
    tu_n_skipped++;
    fprintf(stderr, "[SKIP] %s::%s: %s\n", st->test->category, st->test->name,
            st->message && *st->message ? st->message : "(no reason given)");
}

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
    (void)st; /* (its tests_skipped counts the tests a --filter left out too) */
    if (tu_n_skipped) fprintf(stderr, "[====] Skipped: %zu (each one above with its reason)\n", tu_n_skipped);
}
