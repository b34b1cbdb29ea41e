/*
 * model_watch.c — the model file under a running server.
 *
 * Once the engine holds its own copy of the weights (both backends do: see cpu/cpu_backend.c,
 * and the CUDA backend's device copies), the server stops reading the file (gguf_detach): a
 * `cp other.gguf model.gguf` over it, a truncation or an in-place write can no longer raise
 * SIGBUS in the server or change its output. What is left is telling the operator: every
 * SRV_MODEL_WATCH_MS the loop asks a worker thread to stat the path (never the loop itself: the
 * file may sit on a stalled mount) and, when the size, modification time, inode or device differ
 * from the loaded file's, logs one line per distinct change. The server keeps serving the
 * weights it loaded; a restart loads the new file.
 *
 * Loop thread (the stat runs on a libuv worker; one at a time).
 */
#include <stdio.h>
#include <string.h>

#include "model/gguf.h"
#include "server/internal.h"

#define SRV_MODEL_WATCH_MS 2000

static void on_stat(uv_fs_t *req)
{
    srv *s = req->data;
    s->model_stat_busy = 0;
    const gguf_file_id *id = gguf_identity(s->m->gguf);
    gguf_file_id now = {0};
    int gone = req->result < 0;
    if (!gone) {
        const uv_stat_t *st = &req->statbuf;
        now = (gguf_file_id){st->st_size, st->st_ino, st->st_dev,
                             (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec};
    }
    uv_fs_req_cleanup(req);
    int same = !gone && now.ino == id->ino && now.dev == id->dev && now.mtime_ns == id->mtime_ns &&
               (now.size == id->size || now.size == 0 /* a block device */);
    if (same) { /* (back to) the loaded file */
        s->model_seen = *id;
        s->model_seen_gone = 0;
        return;
    }
    if (gone ? s->model_seen_gone : !s->model_seen_gone && !memcmp(&now, &s->model_seen, sizeof now))
        return; /* this change was logged */
    s->model_seen = now;
    s->model_seen_gone = gone;
    if (gone)
        fprintf(stderr, "kvserve: the model file %s is gone (%s); this server keeps serving the weights it "
                "loaded\n", s->cfg->model_path, uv_strerror((int)req->result));
    else
        fprintf(stderr, "kvserve: the model file %s changed under the running server (%s%llu bytes, modified %lld.%09lld, "
                "inode %llu; loaded: %llu bytes, modified %lld.%09lld, inode %llu); this server keeps serving the "
                "weights it loaded: restart it to load the new file\n",
                s->cfg->model_path, now.ino != id->ino ? "replaced: " : "rewritten: ", (unsigned long long)now.size,
                (long long)(now.mtime_ns / 1000000000), (long long)(now.mtime_ns % 1000000000),
                (unsigned long long)now.ino, (unsigned long long)id->size, (long long)(id->mtime_ns / 1000000000),
                (long long)(id->mtime_ns % 1000000000), (unsigned long long)id->ino);
}

static void on_tick(uv_timer_t *t)
{
    srv *s = t->data;
    if (s->model_stat_busy || !s->m) return;
    s->model_stat.data = s;
    if (uv_fs_stat(&s->loop, &s->model_stat, s->cfg->model_path, on_stat) == 0) s->model_stat_busy = 1;
}

void srv__model_watch_start(srv *s)
{
    const gguf_file_id *id = gguf_identity(s->m->gguf);
    if (!id->ino && !id->dev) return; /* not a file */
    if (uv_timer_init(&s->loop, &s->model_timer)) return;
    s->model_timer.data = s;
    s->model_watch_on = 1;
    s->model_seen = *id;
    uv_timer_start(&s->model_timer, on_tick, SRV_MODEL_WATCH_MS, SRV_MODEL_WATCH_MS);
}
