/*
 * model_watch.c — the model file under a running server.
 *
 * Once the engine holds its own copy of the weights (both backends do: see cpu/cpu_backend.c,
 * and the CUDA backend's device copies), the server stops reading the file (gguf_detach): a
 * `cp other.gguf model.gguf` over it, a truncation or an in-place write can no longer raise
 * SIGBUS in the server or change its output. What is left is telling the operator: every
 * SRV_MODEL_WATCH_MS the loop starts a stat of the path and, when the size, modification time,
 * inode or device differ from the loaded file's, logs one line per distinct change. The server
 * keeps serving the weights it loaded; a restart loads the new file.
 *
 * The stat runs on a detached thread of its own, never the loop and never a libuv worker: the
 * file may sit on a mount that stalls (NFS, FUSE), and a libuv worker stuck in stat() would hold
 * up the loop's teardown and then the process's exit (libuv joins its workers at exit), so a
 * SIGTERM would drain and never exit. The loop collects the result on a later tick; at most one
 * stat is in flight; srv__model_watch_stop abandons one that has not returned (the thread frees
 * the job when its stat returns).
 *
 * Loop thread, except mw_stat_thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/gguf.h"
#include "server/internal.h"

#define SRV_MODEL_WATCH_MS 2000

enum { MW_RUNNING, MW_DONE, MW_ABANDONED };

/* One stat of the model's path: owned by the loop until the thread is started, then by whichever
 * of the two sees the other's mark last (the loop: MW_DONE; the thread: MW_ABANDONED). */
struct srv_model_stat {
    _Atomic int state; /* MW_* */
    int err;           /* 0, or the errno of stat() */
    struct stat st;
    char path[];       /* the model's path (a copy: the thread may outlive the server) */
};

static void *mw_stat_thread(void *p)
{
    srv_model_stat *j = p;
    j->err = stat(j->path, &j->st) ? errno : 0;
    if (atomic_exchange(&j->state, MW_DONE) == MW_ABANDONED) free(j);
    return NULL;
}

/* Compares the file's identity now with the loaded one's and logs a change not logged yet. */
static void mw_compare(srv *s, const srv_model_stat *j)
{
    const gguf_file_id *id = gguf_identity(s->m->gguf);
    gguf_file_id now = {0};
    int gone = j->err != 0;
    if (!gone)
        now = (gguf_file_id){(uint64_t)j->st.st_size, j->st.st_ino, j->st.st_dev,
                             (int64_t)j->st.st_mtim.tv_sec * 1000000000 + j->st.st_mtim.tv_nsec};
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
                "loaded\n", s->cfg->model_path, strerror(j->err));
    else
        fprintf(stderr, "kvserve: the model file %s changed under the running server (%s%llu bytes, modified %lld.%09lld, "
                "inode %llu; loaded: %llu bytes, modified %lld.%09lld, inode %llu); this server keeps serving the "
                "weights it loaded: restart it to load the new file\n",
                s->cfg->model_path, now.ino != id->ino ? "replaced: " : "rewritten: ", (unsigned long long)now.size,
                (long long)(now.mtime_ns / 1000000000), (long long)(now.mtime_ns % 1000000000),
                (unsigned long long)now.ino, (unsigned long long)id->size, (long long)(id->mtime_ns / 1000000000),
                (long long)(id->mtime_ns % 1000000000), (unsigned long long)id->ino);
}

/* Every SRV_MODEL_WATCH_MS: the result of the stat in flight, if it returned, then a new one.
 * A stat still running (a stalled mount) is waited for, never a second one started. */
static void on_tick(uv_timer_t *t)
{
    srv *s = t->data;
    srv_model_stat *j = s->model_stat;
    if (j) {
        if (atomic_load(&j->state) != MW_DONE) return;
        mw_compare(s, j);
        free(j);
        s->model_stat = NULL;
    }
    size_t n = strlen(s->cfg->model_path) + 1;
    if (!(j = malloc(sizeof *j + n))) return;
    atomic_init(&j->state, MW_RUNNING);
    memcpy(j->path, s->cfg->model_path, n);
    pthread_attr_t a;
    pthread_t th;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    if (pthread_create(&th, &a, mw_stat_thread, j)) free(j);
    else s->model_stat = j;
    pthread_attr_destroy(&a);
}

void srv__model_watch_start(srv *s)
{
    const gguf_file_id *id = gguf_identity(s->m->gguf);
    if (!id->ino && !id->dev) return; /* not a file */
    if (uv_timer_init(&s->loop, &s->model_timer)) return;
    s->model_timer.data = s;
    s->model_watch_on = 1;
    s->model_seen = *id;
    /* the first stat at once, its result a tick later */
    uv_timer_start(&s->model_timer, on_tick, SRV_MODEL_WATCH_MS / 2, SRV_MODEL_WATCH_MS);
}

void srv__model_watch_stop(srv *s)
{
    if (!s->model_watch_on) return;
    uv_timer_stop(&s->model_timer);
    uv_close((uv_handle_t *)&s->model_timer, NULL);
    s->model_watch_on = 0;
    srv_model_stat *j = s->model_stat;
    s->model_stat = NULL;
    if (j && atomic_exchange(&j->state, MW_ABANDONED) == MW_DONE) free(j); /* else the thread frees it */
}
