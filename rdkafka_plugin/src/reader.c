/* Reader mode (kafka.audit.emit=false): the plugin stamps and counts, the application reads the counts and
 * sends the snapshots itself (the Python AuditedProducer's plugin path, audit_producer/rdkafka_plugin_counts.py;
 * docs/DESIGN.md "librdkafka plugin").
 *
 * An auditor in reader mode has the id the application gave (kafka.audit.id) and is shared by every client
 * instance created with that id, so the inner producers an application swaps (a live reconfiguration) stamp
 * one sequence and count into one window table. The application finds it with kafka_audit_find(), reads the
 * cumulative counts with kafka_audit_read() and tells it which windows it closed (their counts are dropped).
 * Auditors are never freed (plugin.c's on_destroy), so a handle stays valid; a closed one reads as empty. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct auditor *registry; /* open auditors in reader mode, by id_text */

struct auditor *registry_attach(const char *id_text) {
    pthread_mutex_lock(&registry_lock);
    struct auditor *a = registry;
    while (a && strcmp(a->id_text, id_text))
        a = a->next_registered;
    if (a) {
        a->refs++;
        /* from now on topics are compared by name only: an instance's name strings are freed with it, and
         * another instance's may take their addresses (auditor.c, acknowledgements.c) */
        __atomic_store_n(&a->shared, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&registry_lock);
    return a;
}

void registry_add(struct auditor *a) {
    pthread_mutex_lock(&registry_lock);
    a->refs = 1;
    a->next_registered = registry;
    registry = a;
    pthread_mutex_unlock(&registry_lock);
}

int registry_detach(struct auditor *a) {
    pthread_mutex_lock(&registry_lock);
    int left = --a->refs;
    if (left <= 0) {
        struct auditor **p = &registry;
        while (*p && *p != a)
            p = &(*p)->next_registered;
        if (*p)
            *p = a->next_registered;
    }
    pthread_mutex_unlock(&registry_lock);
    return left;
}

/* The open auditor in reader mode with producer id id_text ("~" + 16 hex), NULL if none: a handle for the
 * functions below (valid for the process's life). */
EXPORT void *kafka_audit_find(const char *id_text) {
    pthread_mutex_lock(&registry_lock);
    struct auditor *a = registry;
    while (a && strcmp(a->id_text, id_text))
        a = a->next_registered;
    pthread_mutex_unlock(&registry_lock);
    return a;
}

/* The sequence number of the last message stamped (0: none yet). */
EXPORT long long kafka_audit_last_sequence(void *handle) {
    struct auditor *a = handle;
    return (long long)__atomic_load_n(&a->last_sequence, __ATOMIC_ACQUIRE);
}

static void put_text(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put_text(struct buf *b, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof line)
        b->failed = 1;
    else
        buf_put(b, line, (size_t)n);
}

/* Write the cumulative counts of every open window into out (at most cap bytes, not NUL-terminated), then
 * drop the windows whose ids are in release[0..n_release) (the application closed them; this read gives
 * their last counts). One line per item, fields separated by one space:
 *   S <last sequence> <unattributed acks> <windows dropped at the cap> <internal errors> <closed 0|1>
 *   W <wid> <start ms> <sent> <acknowledged> <failed> <value bytes> <first seq> <last seq> <topic>
 *   P <partition> <acknowledged> <failed> <highest acknowledged offset, -1: none>      (of the W above)
 *   E <partition> <librdkafka error code> <count> <rd_kafka_err2name>                  (of the W above)
 * Returns the length written; -(the length needed) if cap is too small (nothing is released then); -1 on
 * memory exhaustion. */
EXPORT long long kafka_audit_read(void *handle, const unsigned long long *release, long long n_release, char *out,
                                  long long cap) {
    struct auditor *a = handle;
    struct buf b = {0};
    pthread_mutex_lock(&a->lock);
    pthread_mutex_lock(&a->ack_lock);
    put_text(&b, "S %llu %llu %llu %llu %d\n", (unsigned long long)a->last_sequence, a->unattributed,
             a->windows_dropped, a->internal_errors, a->closed);
    for (int s = 1; !a->closed && s <= a->s.max_windows; s++) {
        struct window *w = a->by_slot[s];
        if (!w)
            continue;
        put_text(&b, "W %llu %lld %lld %lld %lld %lld %lld %lld %s\n", (unsigned long long)w->wid, w->start, w->sent,
                 w->acknowledged, w->failed, w->bytes, w->first_sequence, w->last_sequence, w->topic);
        for (int i = 0; i < w->n_partitions; i++) {
            struct partition_counts *c = &w->partitions[i];
            if (!c->present)
                continue;
            put_text(&b, "P %d %lld %lld %lld\n", i - 1, c->acknowledged, c->failed, c->last_offset);
            for (int e = 0; e < c->n_errors; e++)
                put_text(&b, "E %d %d %lld %s\n", i - 1, c->errors[e].err, c->errors[e].n,
                         a->api->err2name((rd_kafka_resp_err_t)c->errors[e].err));
        }
    }
    long long len = b.failed ? -1 : (long long)b.len;
    if (len >= 0 && len > cap) {
        len = -len;
    } else if (len >= 0) {
        memcpy(out, b.p, (size_t)len);
        for (long long i = 0; !a->closed && i < n_release; i++)
            audit_release_window(a, release[i]);
    }
    pthread_mutex_unlock(&a->ack_lock);
    pthread_mutex_unlock(&a->lock);
    free(b.p);
    return len;
}
