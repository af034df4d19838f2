/* Acknowledgements: librdkafka's on_acknowledgement (its broker threads) counts an acknowledged or failed
 * record in the window on_send counted it in (auditor.c), per partition, with error names, the highest
 * acknowledged offset and the acknowledgement latency (docs/DESIGN.md, "librdkafka plugin").
 *
 * The window is found by the record's key, (topic, window of its CreateTime), when that is sure to be the
 * window on_send used (window_by_key); otherwise by the sequence of the record's stamp through the ring of
 * window slots, as the JVM's ProducerAuditor does (window_by_sequence). Both give the same window whenever
 * the key is used, so the counts are the sequence's (one difference, in the key's favour: with more than
 * kafka.audit.inflight.slots records in flight the ring has overwritten an old record's slot, and the
 * sequence leaves its acknowledgement unattributed, the key counts it); the key saves reading the stamp back from
 * librdkafka's header list (rd_kafka_message_headers, rd_kafka_header_get_last: three dependent loads into
 * memory the application thread allocated, most of on_acknowledgement's cost before). Everything here runs
 * under the acknowledgement lock and touches only the auditor's and the windows' acknowledgement groups
 * (audit.h), apart from reading what on_send wrote for the sequence path. */
#include <stdlib.h>
#include <string.h>

#include "audit.h"

/* The sequence of this instance's stamp (its producer id, a minimal varint), 0 if it is not one. */
static uint64_t sequence_of(const struct auditor *a, const unsigned char *value, size_t len) {
    if (len <= 8 || len > 17 || memcmp(value, a->id, 8))
        return 0;
    uint64_t seq = 0;
    for (size_t i = 8; i < len; i++) {
        int more = value[i] & 0x80;
        if ((more != 0) != (i < len - 1))
            return 0;
        seq |= (uint64_t)(value[i] & 0x7f) << (7 * (i - 8));
    }
    return seq;
}

static struct partition_counts *partition_of(struct window *w, int p) {
    int i = p + 1;
    if (i < 0 || i > 1 << 20)
        return NULL;
    if (i >= w->n_partitions) {
        int n = w->n_partitions ? w->n_partitions : 8;
        while (n <= i)
            n *= 2;
        struct partition_counts *np = realloc(w->partitions, (size_t)n * sizeof *np);
        if (!np)
            return NULL;
        memset(np + w->n_partitions, 0, (size_t)(n - w->n_partitions) * sizeof *np);
        w->partitions = np;
        w->n_partitions = n;
    }
    struct partition_counts *c = &w->partitions[i];
    if (!c->present) {
        c->present = 1;
        c->last_offset = -1;
    }
    return c;
}

static int latency_bucket(long long ms) {
    if (ms <= 0)
        return 0;
    int bits = 64 - __builtin_clzll((unsigned long long)ms);
    return (int)(4LL * bits + (((unsigned long long)ms << 2) >> (bits - 1)) - 4);
}

/* The sequence of record m's stamp (its last `~a` header), 0 if it has none of this instance's. */
static uint64_t stamp_sequence(const struct auditor *a, const rd_kafka_message_t *m) {
    rd_kafka_headers_t *h = NULL;
    const void *v = NULL;
    size_t len = 0;
    if (a->api->message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR && h &&
        a->api->header_get_last(h, "~a", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR && v)
        return sequence_of(a, v, len);
    return 0;
}

/* The window record m was counted in at on_send, by its stamp's sequence through the ring (the JVM's
 * ProducerAuditor); NULL if none (not stamped here, overwritten in the ring, or its window gone). */
static struct window *window_by_sequence(struct auditor *a, const rd_kafka_message_t *m) {
    uint64_t seq = stamp_sequence(a, m);
    uint64_t last = __atomic_load_n(&a->last_sequence, __ATOMIC_ACQUIRE);
    struct window *w = NULL;
    if (seq > 0 && seq <= last && seq + a->ring_len > last)
        w = a->by_slot[__atomic_load_n(&a->ring[seq & (a->ring_len - 1)], __ATOMIC_RELAXED)];
    if (!w || w->state == WINDOW_DONE || (long long)seq < __atomic_load_n(&w->first_sequence, __ATOMIC_RELAXED) ||
        (long long)seq > __atomic_load_n(&w->last_sequence, __ATOMIC_RELAXED))
        return NULL;
    return w;
}

/* The same window found by its key, (topic, window of the CreateTime), without reading the stamp (three
 * dependent loads into librdkafka's header list per record, most of on_acknowledgement's cost): a window's
 * key is unique among the open ones, and a record's window is open until all its records are accounted for
 * unless it was removed with records in flight (at kafka.audit.max.windows, or released by the reader), after
 * which new windows use the sequence. NULL, for the sequence to decide, when it cannot be sure to give the same
 * window: a message went out unstamped (its record counts in no window), the timestamp is not the CreateTime
 * on_send saw (a LogAppendTime topic; none), or no open window has that key. Looked up in the previous
 * acknowledgement's window (a range check), then in ack_windows, direct-mapped by the topic handle's address
 * and the window start (the entry checked against both), then in the table. The topic is compared by the
 * address of librdkafka's name string first (rd_kafka_topic_name: the topic object's own string, which lives as
 * long as the client instance, so one address is one topic while one instance uses the auditor), by strcmp when
 * the addresses differ or once the auditor served a second instance (reader mode's swap: the first instance's
 * strings are freed with it, and the second's may take their addresses). A strcmp per record was 1.7% of an
 * audited producer's CPU samples (perf, 100-byte messages). */
static struct window *window_by_key(struct auditor *a, const rd_kafka_message_t *m, long long ts,
                                    rd_kafka_timestamp_type_t tstype) {
    if (tstype != RD_KAFKA_TIMESTAMP_CREATE_TIME || ts <= 0 || __atomic_load_n(&a->unstamped, __ATOMIC_RELAXED))
        return NULL;
    const char *topic = a->api->topic_name(m->rkt);
    struct window *w = a->ack_last;
    if (!w || ts < w->start || ts >= w->end || topic_differs(a, w, topic, a->ack_last_topic)) {
        long long start = window_start(ts, a->s.window_ms);
        uint64_t h = ((uint64_t)start ^ (uint64_t)(uintptr_t)m->rkt) * 0x9e3779b97f4a7c15ULL;
        struct window **entry = &a->ack_windows[h >> 60 & (ACK_WINDOW_CACHE - 1)];
        w = *entry;
        if (!w || w->start != start || strcmp(w->topic, topic)) {
            w = NULL;
            for (int s = 1; s <= a->s.max_windows && !w; s++) {
                struct window *c = a->by_slot[s];
                if (c && c->start == start && !strcmp(c->topic, topic))
                    w = c;
            }
            *entry = w;
        }
        a->ack_last = w;
    }
    a->ack_last_topic = topic; /* ack_last, when not NULL, is this topic's window */
    return w && !w->check_sequence ? w : NULL;
}

/* The receive time of the Produce response a broker thread is handling (on_response_received, called in that
 * thread before the response is parsed): every record the response acknowledges was acknowledged then, so its
 * latency needs no clock reading of its own (clock_gettime per record was 2.3% of an audited producer's CPU
 * samples, perf, 100-byte messages). A successful acknowledgement comes only from a Produce response, handled in
 * the broker thread that received it, after this was set for it; everything else (failures, a librdkafka without
 * on_response_received, another client instance's thread) reads the clock. */
static __thread rd_kafka_t *response_rk;
static __thread long long response_ms;

rd_kafka_resp_err_t audit_on_response_received(rd_kafka_t *rk, int sockfd, const char *brokername, int32_t brokerid,
                                               int16_t api_key, int16_t api_version, int32_t corr_id, size_t size,
                                               int64_t rtt, rd_kafka_resp_err_t err, void *ic_opaque) {
    (void)sockfd, (void)brokername, (void)brokerid, (void)api_version, (void)corr_id, (void)size, (void)rtt;
    (void)err, (void)ic_opaque;
    if (api_key == 0) { /* Produce (the Kafka protocol's ApiKey 0) */
        response_ms = now_ms();
        response_rk = rk;
    }
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

void audit_on_ack(struct auditor *a, rd_kafka_t *rk, rd_kafka_message_t *m) {
    rd_kafka_headers_t *h = NULL; /* the stamp's list, to recycle (header_pool.c) */
    if (!m->err && a->api->message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR && h)
        __builtin_prefetch(h); /* first read after the counting: its cache miss overlaps the counting's work */
    rd_kafka_timestamp_type_t tstype;
    long long timestamp_ms = a->api->message_timestamp(m, &tstype);
    rd_kafka_resp_err_t err = m->err;
    long long now = !err && response_rk == rk ? response_ms : now_ms();
    pthread_mutex_lock(&a->ack_lock);
    struct window *w = NULL;
    if (!a->closed && !(w = window_by_key(a, m, timestamp_ms, tstype)))
        w = window_by_sequence(a, m);
    if (!w) {
        a->unattributed++;
        pthread_mutex_unlock(&a->ack_lock);
        return;
    }
    struct partition_counts *c = partition_of(w, m->partition);
    if (!err) {
        w->acknowledged++;
        if (c) {
            c->acknowledged++;
            if (m->offset > c->last_offset)
                c->last_offset = m->offset;
        }
        if (timestamp_ms > 0) {
            long long lat = now - timestamp_ms;
            w->latency[latency_bucket(lat)]++;
            w->latency_total++;
            if (lat > w->latency_max)
                w->latency_max = lat;
        }
    } else {
        w->failed++;
        if (c) {
            c->failed++;
            int e = 0;
            while (e < c->n_errors && c->errors[e].err != (int)err)
                e++;
            if (e == c->n_errors) {
                struct error_count *ne = realloc(c->errors, (size_t)(e + 1) * sizeof *ne);
                if (ne) {
                    c->errors = ne;
                    c->errors[e].err = (int)err;
                    c->errors[e].n = 0;
                    c->n_errors++;
                }
            }
            if (e < c->n_errors)
                c->errors[e].n++;
        }
    }
    if (!w->acks_changed)
        w->acks_changed = 1;
    header_pool_give(a, m, h);
    pthread_mutex_unlock(&a->ack_lock);
}
