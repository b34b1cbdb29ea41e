/*
 * test_options.c — the option table: defaults, flags, config files, sizes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/cli.h"

Test(options, sizes)
{
    size_t v;
    cr_assert_eq(cli_parse_size("2GiB", &v), 0);
    cr_assert_eq(v, (size_t)2 << 30);
    cr_assert_eq(cli_parse_size("512M", &v), 0);
    cr_assert_eq(v, (size_t)512000000);
    cr_assert_eq(cli_parse_size("512MiB", &v), 0);
    cr_assert_eq(v, (size_t)512 << 20);
    cr_assert_eq(cli_parse_size("4096", &v), 0);
    cr_assert_eq(v, 4096u);
    cr_assert_neq(cli_parse_size("12X", &v), 0);
    cr_assert_neq(cli_parse_size("", &v), 0);
}

Test(options, flags_and_defaults)
{
    char *argv[] = {"kvserve", "serve", "-m", "x.gguf", "--port=9000", "--no-prefix-cache",
                    "--kv-memory", "1GiB", NULL};
    cli_opts o;
    cli_opts_default(&o);
    cr_assert_eq(cli_parse("serve", 8, argv, 2, &o), 0);
    cr_assert_str_eq(o.model, "x.gguf");
    cr_assert_eq(o.port, 9000);
    cr_assert_eq(o.no_prefix_cache, 1);
    cr_assert_eq(o.kv_memory_bytes, (size_t)1 << 30);
    cr_assert_eq(o.block_size, 16);
    cr_assert_str_eq(o.host, "127.0.0.1");
    cli_opts_fini(&o);
}

Test(options, rejects_foreign_and_unknown)
{
    char *a1[] = {"kvserve", "info", "--port", "1", NULL};
    cli_opts o;
    cli_opts_default(&o);
    cr_assert_neq(cli_parse("info", 4, a1, 2, &o), 0);
    cli_opts_fini(&o);
    char *a2[] = {"kvserve", "serve", "--bogus", NULL};
    cli_opts_default(&o);
    cr_assert_neq(cli_parse("serve", 3, a2, 2, &o), 0);
    cli_opts_fini(&o);
}

Test(options, config_file_then_flags)
{
    char path[] = "/tmp/kvserve_cfg_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# comment\nport = 7000\nmax-seqs = 12\nhost = \"0.0.0.0\"\n");
    fclose(f);
    char *argv[] = {"kvserve", "serve", "--config", path, "--port", "7001", NULL};
    cli_opts o;
    cli_opts_default(&o);
    cr_assert_eq(cli_parse("serve", 6, argv, 2, &o), 0);
    cr_assert_eq(o.port, 7001);
    cr_assert_eq(o.max_seqs, 12);
    cr_assert_str_eq(o.host, "0.0.0.0");
    cli_opts_fini(&o);
    unlink(path);
}
