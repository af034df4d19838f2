/* Counting and snapshots of one audited producer instance: the rules of the JVM interceptors'
 * ProducerAuditor.java and the Python AuditedProducer (docs/DESIGN.md, "librdkafka plugin").
 *
 * Per (topic, window of the message's CreateTime) it counts sent and value bytes (on_send, here),
 * acknowledged and failed (on_acknowledgement, acknowledgements.c, per partition, with error names and the
 * highest acknowledged offset) and the acknowledgement latency. on_send writes each message's window slot
 * into a ring indexed by its sequence (2 bytes per message in flight; starts at 65536 and doubles up to
 * kafka.audit.inflight.slots while the next block of sends would overwrite a window not yet accounted for),
 * through which an acknowledgement finds its window when its key does not (acknowledgements.c). As in the JVM's
 * ProducerAuditor, on_send (application threads) holds the send lock and on_acknowledgement (librdkafka's
 * broker threads) the acknowledgement lock, each for a few field updates, so they never wait for each other;
 * what both read (the window table, the ring) changes under both locks (a new or dropped window, a ring
 * growth: rare), and what each writes per message is on cache lines of its own (audit.h). librdkafka hands
 * a message from produce() to its broker thread through its queues' mutexes, so the ring slot and the
 * sequence on_send wrote are visible to that message's acknowledgement. The plugin's thread takes both to
 * encode the due snapshots, then sends them through its own producer without them. Windows are capped
 * (kafka.audit.max.windows; beyond, the oldest is dropped and counted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audit.h"

long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void log_failure(struct auditor *a, const char *what, const char *detail) {
    unsigned long long n = a->snapshot_failures;
    if (n <= 10 || (n & (n - 1)) == 0)
        fprintf(stderr, "%%4|kafka-audit|%s: %s: %s (#%llu; the cumulative counts are sent again)\n", a->client_id,
                what, detail, n);
}

/* Whether every record counted in window w has an acknowledgement or a failure (ProducerWindow.accounted). */
static int window_accounted(const struct window *w) {
    return w->acknowledged + w->failed >= w->sent;
}

static void free_window(struct window *w) {
    for (int p = 0; p < w->n_partitions; p++)
        free(w->partitions[p].errors);
    free(w->partitions);
    free(w->topic);
    free(w);
}

/* Take a window out of the table (under both locks); freed, or kept as retired when `retire`. */
static void remove_window(struct auditor *a, struct window *w, int keep);

/* How long after its end a closed window's counts are kept for late records, ms (ProducerAuditor.java's
 * RETIRED_RETENTION_MS, the audit consumer's late retention). */
#define RETIRED_RETENTION_MS 3600000LL

/* Keep a closed window's counts, at most max.windows of them, for an hour after their end: a record with a
 * CreateTime in a closed window (e.g. a copy keeping its source's) continues them, never restarts them
 * from 0 under the same snapshot key. */
static void retire(struct auditor *a, struct window *w) {
    long long horizon = now_ms() - RETIRED_RETENTION_MS;
    int k = 0;
    for (int i = 0; i < a->n_retired; i++) {
        if (a->retired[i]->end < horizon)
            free_window(a->retired[i]);
        else
            a->retired[k++] = a->retired[i];
    }
    a->n_retired = k;
    if (a->n_retired == a->s.max_windows) { /* full: the oldest goes */
        int oldest = 0;
        for (int i = 1; i < a->n_retired; i++)
            if (a->retired[i]->start < a->retired[oldest]->start)
                oldest = i;
        free_window(a->retired[oldest]);
        a->retired[oldest] = a->retired[--a->n_retired];
    }
    w->state = WINDOW_DONE;
    a->retired[a->n_retired++] = w;
}

static void remove_window(struct auditor *a, struct window *w, int keep) {
    if (a->by_slot[w->slot] == w)
        a->by_slot[w->slot] = NULL;
    if (a->last == w)
        a->last = NULL;
    for (int i = 0; i < ACK_WINDOW_CACHE; i++)
        if (a->ack_windows[i] == w)
            a->ack_windows[i] = NULL;
    if (a->ack_last == w)
        a->ack_last = NULL;
    if (!window_accounted(w))
        a->removed_in_flight++; /* its records' acknowledgements may still come */
    a->open--;
    if (keep && a->retired)
        retire(a, w);
    else
        free_window(w);
}

void audit_free_windows(struct auditor *a) {
    for (int s = 1; s <= a->s.max_windows; s++)
        if (a->by_slot[s])
            remove_window(a, a->by_slot[s], 0);
    for (int i = 0; i < a->n_retired; i++)
        free_window(a->retired[i]);
    a->n_retired = 0;
}

/* Reader mode: the application closed window wid (its last counts read): drop it; under both locks. A
 * record with a CreateTime in it later starts a new window (a new wid), which the reader adds to the closed
 * window's counts. A window with records in flight is kept: a record of it sent after the application's
 * last reading (a late record) is acknowledged later, and only this window can place that acknowledgement;
 * the reader, seeing its counts grow, reopens its own and asks again once it closes it again. */
void audit_release_window(struct auditor *a, uint64_t wid) {
    for (int s = 1; s <= a->s.max_windows; s++) {
        struct window *w = a->by_slot[s];
        if (w && w->wid == wid) {
            if (window_accounted(w))
                remove_window(a, w, 0);
            return;
        }
    }
}

/* The window (topic, start), created (dropping the oldest at the cap) if needed; under both locks. A window
 * created or reopened after a window was removed with records in flight places its acknowledgements by
 * their stamps' sequences (audit_on_ack), as an acknowledgement of the removed window may have its key. */
static struct window *window_for(struct auditor *a, const char *topic, long long start) {
    int free_slot = 0;
    struct window *oldest = NULL;
    for (int s = 1; s <= a->s.max_windows; s++) {
        struct window *w = a->by_slot[s];
        if (!w) {
            if (!free_slot)
                free_slot = s;
            continue;
        }
        if (w->start == start && !strcmp(w->topic, topic)) {
            if (w->state == WINDOW_FINAL_PENDING)
                w->state = WINDOW_OPEN; /* a record with an old timestamp: the window reopens */
            return w;
        }
        if (!oldest || w->start < oldest->start)
            oldest = w;
    }
    if (!free_slot) {
        free_slot = oldest->slot;
        remove_window(a, oldest, 0);
        a->windows_dropped++;
    }
    for (int i = 0; i < a->n_retired; i++) {
        struct window *r = a->retired[i];
        if (r->start == start && !strcmp(r->topic, topic)) { /* a late record: its counts continue */
            a->retired[i] = a->retired[--a->n_retired];
            r->slot = (uint16_t)free_slot;
            r->state = WINDOW_OPEN;
            r->dirty = 1;
            r->check_sequence = a->removed_in_flight > 0;
            a->by_slot[free_slot] = r;
            a->open++;
            return r;
        }
    }
    struct window *w = aligned_alloc(CACHE_LINE, sizeof *w);
    if (w)
        memset(w, 0, sizeof *w);
    if (!w || !(w->topic = strdup(topic))) {
        free(w);
        return NULL;
    }
    w->check_sequence = a->removed_in_flight > 0;
    w->wid = ++a->next_wid;
    w->start = start;
    w->end = start + a->s.window_ms;
    w->slot = (uint16_t)free_slot;
    w->first_sequence = w->last_sequence = -1;
    a->by_slot[free_slot] = w;
    a->open++;
    return w;
}

/* Double the ring, keeping the slots of the sequences before seq; under the lock. */
static void grow_ring(struct auditor *a, uint64_t seq) {
    size_t n = a->ring_len * 2;
    uint16_t *r = calloc(n, sizeof *r);
    if (!r)
        return;
    for (uint64_t s = seq > a->ring_len ? seq - a->ring_len : 1; s < seq; s++)
        r[s & (n - 1)] = a->ring[s & (a->ring_len - 1)];
    free(a->ring);
    a->ring = r;
    a->ring_len = n;
}

/* Whether the block of RING_BLOCK slots from slot i, which the next sequences overwrite, holds a record whose
 * window is not yet accounted for (its first or its last slot: a racy read of the window's acknowledgement
 * group, a hint to grow). Asked once a block, before its first slot is reused: asking for every message, as
 * before, loaded into the application's thread, for each one, the cache line librdkafka's broker thread writes
 * for each acknowledgement (CPU +0.07-0.10 us a 100-byte message while the ring was below its bound; the first
 * million messages of every producer with the default bound: lab/bench/results/producer-rdkafka-plugin.txt). */
static int ring_block_in_flight(const struct auditor *a, size_t i) {
    uint16_t ends[2] = {a->ring[i], a->ring[(i + RING_BLOCK - 1) & (a->ring_len - 1)]};
    for (int k = 0; k < 2; k++) {
        const struct window *w = ends[k] ? a->by_slot[ends[k]] : NULL;
        if (w && !window_accounted(w))
            return 1;
    }
    return 0;
}

int audit_on_send(struct auditor *a, const char *topic, long long timestamp_ms, long long value_bytes,
                  unsigned char *stamp, size_t *stamp_len, struct pooled_header *reuse) {
    uint64_t seq;
    pthread_mutex_lock(&a->lock);
    if (a->closed) {
        pthread_mutex_unlock(&a->lock);
        return -1;
    }
    struct window *w = a->last; /* the previous message's window: its [start, end) holds the timestamp? */
    if (!w || timestamp_ms < w->start || timestamp_ms >= w->end || w->state != WINDOW_OPEN ||
        topic_differs(a, w, topic, a->last_topic)) {
        pthread_mutex_lock(&a->ack_lock); /* the table may change */
        w = window_for(a, topic, window_start(timestamp_ms, a->s.window_ms));
        pthread_mutex_unlock(&a->ack_lock);
        if (!w) {
            a->internal_errors++;
            __atomic_store_n(&a->unstamped, 1, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&a->lock);
            return -1;
        }
        a->last = w;
    }
    a->last_topic = topic; /* a->last is this topic's window (the address compared as acknowledgements.c does) */
    seq = a->last_sequence + 1;
    __atomic_store_n(&a->last_sequence, seq, __ATOMIC_RELEASE);
    w->sent++;
    w->bytes += value_bytes;
    if (w->first_sequence < 0)
        __atomic_store_n(&w->first_sequence, (long long)seq, __ATOMIC_RELAXED);
    __atomic_store_n(&w->last_sequence, (long long)seq, __ATOMIC_RELAXED);
    if (!w->dirty)
        w->dirty = 1;
    size_t i = seq & (a->ring_len - 1);
    if ((i & (RING_BLOCK - 1)) == 0 && a->ring_len < (size_t)a->s.inflight_slots && ring_block_in_flight(a, i)) {
        pthread_mutex_lock(&a->ack_lock);
        grow_ring(a, seq);
        pthread_mutex_unlock(&a->ack_lock);
        i = seq & (a->ring_len - 1);
    }
    __atomic_store_n(&a->ring[i], w->slot, __ATOMIC_RELAXED);
    if (reuse)
        reuse->headers = header_pool_take(a, &reuse->value, &reuse->value_len);
    pthread_mutex_unlock(&a->lock);
    memcpy(stamp, a->id, 8);
    size_t n = 8;
    uint64_t v = seq;
    while (v >= 0x80) {
        stamp[n++] = (unsigned char)(v & 0x7f) | 0x80;
        v >>= 7;
    }
    stamp[n++] = (unsigned char)v;
    *stamp_len = n;
    return 0;
}

/* The audit producer's delivery report: a final acknowledged closes its window; a failure marks it to be
 * sent again (cumulative snapshots heal). msg_opaque = window id << 1 | final. */
static void on_snapshot_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    struct auditor *a = opaque;
    uint64_t tag = (uint64_t)(uintptr_t)m->_private;
    uint64_t wid = tag >> 1;
    int final = (int)(tag & 1);
    pthread_mutex_lock(&a->lock);
    pthread_mutex_lock(&a->ack_lock);
    if (m->err) {
        a->snapshot_failures++;
        log_failure(a, "snapshot not delivered", a->api->err2str(m->err));
    } else {
        a->snapshots_sent++;
    }
    for (int s = 1; s <= a->s.max_windows; s++) {
        struct window *w = a->by_slot[s];
        if (!w || w->wid != wid)
            continue;
        if (m->err) {
            w->dirty = 1;
            if (w->state == WINDOW_FINAL_PENDING)
                w->state = WINDOW_OPEN;
        } else if (final && w->state == WINDOW_FINAL_PENDING && !w->acks_changed) {
            remove_window(a, w, 1);
        }
        break;
    }
    pthread_mutex_unlock(&a->ack_lock);
    pthread_mutex_unlock(&a->lock);
}

static rd_kafka_t *audit_producer(struct auditor *a) {
    if (a->audit_rk || now_ms() < a->next_producer_attempt_ms)
        return a->audit_rk;
    const struct rk_api *api = a->api;
    char errstr[512];
    char client_id[300];
    rd_kafka_conf_t *conf = api->conf_new();
    for (int i = 0; i < a->n_connection; i++)
        api->conf_set(conf, a->connection_keys[i], a->connection_values[i], errstr, sizeof errstr);
    snprintf(client_id, sizeof client_id, "%s.kafka-audit", a->client_id);
    api->conf_set(conf, "client.id", client_id, errstr, sizeof errstr);
    api->conf_set(conf, "linger.ms", "20", errstr, sizeof errstr);
    for (int i = 0; i < a->s.n_overrides; i++)
        api->conf_set(conf, a->s.override_keys[i], a->s.override_values[i], errstr, sizeof errstr);
    api->conf_set(conf, "acks", "all", errstr, sizeof errstr);
    api->conf_set(conf, "enable.idempotence", "true", errstr, sizeof errstr);
    api->conf_set_dr_msg_cb(conf, on_snapshot_delivery);
    api->conf_set_opaque(conf, a);
    a->audit_rk = api->kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!a->audit_rk) {
        api->conf_destroy(conf);
        a->snapshot_failures++;
        log_failure(a, "cannot create the audit producer", errstr);
        a->next_producer_attempt_ms = now_ms() + 5000;
    }
    return a->audit_rk;
}

struct pending {
    struct buf value;
    char *key;
    uint64_t tag;
};

/* Encode the snapshots due now (changed windows every snapshot interval; finals of the windows that can
 * close) and hand them to the audit producer. Returns the number handed over. */
static int tick(struct auditor *a, int close_all) {
    long long now = now_ms();
    int cap = a->s.max_windows, n = 0;
    struct pending *out = calloc((size_t)cap, sizeof *out);
    if (!out)
        return 0;
    int acks_prove = strcmp(a->report.acks, "0") != 0;
    pthread_mutex_lock(&a->lock);
    pthread_mutex_lock(&a->ack_lock);
    int periodic = now >= a->next_snapshot_ms;
    if (periodic)
        a->next_snapshot_ms = now + a->s.snapshot_interval_ms;
    for (int s = 1; s <= a->s.max_windows; s++) {
        struct window *w = a->by_slot[s];
        if (!w)
            continue;
        if (w->acks_changed) {
            w->acks_changed = 0;
            w->dirty = 1;
            if (w->state == WINDOW_FINAL_PENDING)
                w->state = WINDOW_OPEN; /* its final is outdated: a new one follows */
        }
        if (w->state != WINDOW_OPEN)
            continue;
        int accounted = window_accounted(w);
        int closing = close_all ||
                      (now >= w->end + a->s.grace_ms &&
                       (accounted || now >= w->end + a->report.message_timeout_ms + a->s.delivery_margin_ms));
        if (!(closing || (periodic && w->dirty)))
            continue;
        struct pending *p = &out[n];
        encode_snapshot(&p->value, a, w, now, closing, accounted && acks_prove);
        size_t klen = strlen(a->client_id) + strlen(w->topic) + 80;
        p->key = malloc(klen);
        if (p->value.failed || !p->key) {
            a->internal_errors++;
            free(p->value.p);
            free(p->key);
            memset(p, 0, sizeof *p);
            continue;
        }
        snprintf(p->key, klen, "producer|%s|%s|%s|-1|%lld", a->client_id, a->id_text, w->topic, w->start);
        p->tag = w->wid << 1 | (uint64_t)closing;
        w->dirty = 0;
        if (closing)
            w->state = WINDOW_FINAL_PENDING;
        n++;
    }
    pthread_mutex_unlock(&a->ack_lock);
    pthread_mutex_unlock(&a->lock);
    rd_kafka_t *rk = n ? audit_producer(a) : a->audit_rk;
    for (int i = 0; i < n; i++) {
        struct pending *p = &out[i];
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__STATE;
        if (rk)
            err = a->api->producev(rk, RD_KAFKA_V_TOPIC(a->s.topic), RD_KAFKA_V_KEY(p->key, strlen(p->key)),
                                   RD_KAFKA_V_VALUE(p->value.p, p->value.len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                   RD_KAFKA_V_TIMESTAMP(now), RD_KAFKA_V_OPAQUE((void *)(uintptr_t)p->tag),
                                   RD_KAFKA_V_END);
        if (err) { /* not even queued: as a failed delivery */
            rd_kafka_message_t m;
            memset(&m, 0, sizeof m);
            m.err = err;
            m._private = (void *)(uintptr_t)p->tag;
            on_snapshot_delivery(rk, &m, a);
        }
        free(p->value.p);
        free(p->key);
    }
    free(out);
    if (rk)
        a->api->poll(rk, 0);
    return n;
}

void *audit_thread(void *arg) {
    struct auditor *a = arg;
    long long period = a->s.snapshot_interval_ms < 1000 ? a->s.snapshot_interval_ms : 1000;
    if (period < 10)
        period = 10;
    pthread_mutex_lock(&a->lock);
    while (!a->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (period % 1000) * 1000000LL;
        until.tv_sec += period / 1000 + ns / 1000000000LL;
        until.tv_nsec = ns % 1000000000LL;
        pthread_cond_timedwait(&a->wake, &a->lock, &until);
        if (a->stop)
            break;
        pthread_mutex_unlock(&a->lock);
        tick(a, 0);
        pthread_mutex_lock(&a->lock);
    }
    pthread_mutex_unlock(&a->lock);
    /* closing: finals for every window, then wait for the audit topic at most kafka.audit.close.timeout.ms */
    long long deadline = now_ms() + a->s.close_timeout_ms;
    for (int attempt = 0; attempt < 2; attempt++) {
        tick(a, 1);
        while (a->audit_rk && a->api->outq_len(a->audit_rk) > 0 && now_ms() < deadline)
            a->api->poll(a->audit_rk, 50);
        pthread_mutex_lock(&a->lock);
        int open = a->open;
        pthread_mutex_unlock(&a->lock);
        if (!open || now_ms() >= deadline)
            break;
    }
    pthread_mutex_lock(&a->lock);
    if (a->open)
        fprintf(stderr, "%%4|kafka-audit|%s: %d window(s) closed without an acknowledged final snapshot\n",
                a->client_id, a->open);
    if (a->unattributed || a->windows_dropped || a->internal_errors || a->snapshot_failures)
        fprintf(stderr,
                "%%5|kafka-audit|%s: at close: %llu acknowledgement(s) not placed in a window, %llu window(s) dropped "
                "at kafka.audit.max.windows, %llu message(s) not stamped, %llu snapshot(s) not delivered, %llu sent\n",
                a->client_id, a->unattributed, a->windows_dropped, a->internal_errors, a->snapshot_failures,
                a->snapshots_sent);
    pthread_mutex_unlock(&a->lock);
    if (a->audit_rk) {
        a->api->kafka_destroy(a->audit_rk);
        a->audit_rk = NULL;
    }
    return NULL;
}
