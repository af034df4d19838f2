/* The producer tier's audit of one librdkafka producer instance (the plugin's counterpart of the JVM
 * interceptors' ProducerAuditor, docs/DESIGN.md "librdkafka plugin"). */
#ifndef KAFKA_AUDIT_AUDIT_H
#define KAFKA_AUDIT_AUDIT_H
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "rdkafka_api.h"

#define AUDIT_LIBRARY "kafka-audit-librdkafka"
#define AUDIT_VERSION "0.1.0"
#define INITIAL_RING_SLOTS ((size_t)1 << 16)
#define RING_BLOCK 1024 /* on_send asks whether the ring must grow once per this many sequences (auditor.c) */
#define LATENCY_BUCKETS 256 /* LatencyHistogram.java's: 4 sub-buckets per power of two */
#define ACK_WINDOW_CACHE 16 /* direct-mapped (topic, window) -> window entries of on_acknowledgement's fast path */
#define HEADER_POOL 32768   /* at most this many recycled stamp header lists per stack (header_pool.c) */
#define HEADER_POOL_SWAP 64 /* on_send takes the acknowledgements' stack once it holds this many */

/* kafka.audit.* settings (defaults: AuditSettings.java, audit_producer.settings). */
struct audit_settings {
    const struct rk_api *api;
    char *topic;
    long long window_ms, snapshot_interval_ms, grace_ms, delivery_margin_ms, close_timeout_ms;
    int max_windows, inflight_slots, enabled;
    int emit;         /* 0: counts only, read by the application (reader.c); no snapshots, no thread */
    char id_text[18]; /* kafka.audit.id ("~" + 16 hex digits), "" for a random one */
    int n_overrides;
    char **override_keys, **override_values; /* kafka.audit.producer.<key> */
};

struct error_count {
    int err;
    long long n;
};

struct partition_counts {
    int present;
    long long acknowledged, failed, last_offset;
    int n_errors;
    struct error_count *errors;
};

enum window_state { WINDOW_OPEN, WINDOW_FINAL_PENDING, WINDOW_DONE };

#define CACHE_LINE 64

/* One (topic, window) of counts, allocated CACHE_LINE-aligned (window_for). Three groups on their own cache
 * lines, so the application's thread (on_send) and librdkafka's broker thread (on_acknowledgement) do not
 * write into a cache line the other reads for every message: what both read (written when the window is
 * created, reopened or closed), what on_send writes, what on_acknowledgement writes. */
struct window {
    uint64_t wid;
    char *topic;
    long long start, end;
    uint16_t slot;
    enum window_state state;
    int check_sequence; /* on_acknowledgement places its records by their stamps' sequences (auditor.c) */
    _Alignas(CACHE_LINE) long long sent, bytes, first_sequence, last_sequence;
    int dirty;
    _Alignas(CACHE_LINE) long long acknowledged, failed;
    int acks_changed;
    int n_partitions; /* partitions[p + 1] for partition p (-1: failed before assignment) */
    struct partition_counts *partitions;
    long long latency[LATENCY_BUCKETS], latency_total, latency_max;
};

struct producer_report { /* ProducerConfig of the snapshots: the host client's settings */
    char acks[8];
    int enable_idempotence, batch_num_messages, message_timeout_ms, retries, retry_backoff_ms;
    double linger_ms;
};

/* A stamp's header list kept for the next record (header_pool.c): the list, and its one `~a` value. */
struct pooled_header {
    rd_kafka_headers_t *headers;
    void *value;
    size_t value_len;
};

/* A stack of them, grown by doubling up to HEADER_POOL. */
struct header_stack {
    struct pooled_header *e;
    int n, cap;
};

/* One audited producer instance, allocated CACHE_LINE-aligned (plugin.c's on_new); what on_send and
 * on_acknowledgement write per message are on cache lines of their own (as struct window's groups). */
struct auditor {
    const struct rk_api *api;
    struct audit_settings s;
    pthread_cond_t wake;
    pthread_t thread;
    int thread_started, stop, closed;
    unsigned char id[8];
    char id_text[18];
    char *client_id, *host, *library_version;
    long long process_id, started_at_ms;
    struct producer_report report;
    int n_connection;
    char **connection_keys, **connection_values; /* the host's connection and security settings */
    uint16_t *ring;
    size_t ring_len;
    struct window **by_slot; /* slots 1..max_windows */
    struct window **retired; /* windows closed with an acknowledged final, kept for late records */
    int n_retired;
    int open;
    uint64_t next_wid;
    long long next_snapshot_ms;
    rd_kafka_t *audit_rk;
    long long next_producer_attempt_ms;
    int refs;                        /* reader mode: the client instances sharing this auditor (by id) */
    int shared; /* reader mode: it served a second instance, whose topic names live at other addresses (atomic) */
    struct auditor *next_registered; /* reader mode: the registry of auditors by id (reader.c) */
    /* the acknowledgements' fast path (auditor.c): off once a message went out unstamped; windows created
     * after one was removed with records in flight place their acknowledgements by sequence */
    int unstamped;
    unsigned long long removed_in_flight;
    /* never-in-the-way counters (logged; the JVM's InterceptorMetrics) */
    unsigned long long windows_dropped, snapshot_failures, snapshots_sent, internal_errors;
    /* on_send's: the send lock (on_send, the window table's additions, the thread's wait) and what it writes */
    _Alignas(CACHE_LINE) pthread_mutex_t lock;
    uint64_t last_sequence;
    struct window *last;
    const char *last_topic; /* librdkafka's name string of last's topic (the address compared first) */
    struct header_stack send_pool; /* header lists for on_send to reuse (header_pool.c) */
    /* on_acknowledgement's: the acknowledgement lock (taken after `lock` when both are needed) and its own */
    _Alignas(CACHE_LINE) pthread_mutex_t ack_lock;
    struct window *ack_last;                      /* the previous acknowledgement's window (auditor.c) */
    const char *ack_last_topic;                   /* librdkafka's name string of ack_last's topic */
    struct window *ack_windows[ACK_WINDOW_CACHE]; /* (topic, window start) -> window, direct-mapped */
    unsigned long long unattributed;
    struct header_stack ack_pool; /* header lists the acknowledgements gave back */
};

long long now_ms(void);

/* Whether window w is not of `topic` (librdkafka's name string of the record's topic), `cached` the name string
 * the caller last saw w's topic under: compared by address first, by strcmp when the addresses differ or once
 * the auditor served a second instance (acknowledgements.c's window_by_key says why). */
static inline int topic_differs(const struct auditor *a, const struct window *w, const char *topic,
                                const char *cached) {
    return (topic != cached || __atomic_load_n(&a->shared, __ATOMIC_RELAXED)) && strcmp(w->topic, topic);
}

/* The start of the window of timestamp_ms (floor to a multiple of window_ms; one division). */
static inline long long window_start(long long timestamp_ms, long long window_ms) {
    long long r = timestamp_ms % window_ms;
    return timestamp_ms - (r < 0 ? r + window_ms : r);
}

/* auditor.c: on_send's counting and stamp, the window table, the plugin's thread and snapshots.
 * audit_on_send: 0 with the stamp (at most 17 bytes) in stamp, *stamp_len, and, when reuse is not NULL, a
 * pooled header list in reuse (its headers NULL if none); -1 if the message is not counted (nothing taken). */
int audit_on_send(struct auditor *a, const char *topic, long long timestamp_ms, long long value_bytes,
                  unsigned char *stamp, size_t *stamp_len, struct pooled_header *reuse);
void *audit_thread(void *arg);
void audit_free_windows(struct auditor *a);
void audit_release_window(struct auditor *a, uint64_t wid);

/* acknowledgements.c: on_acknowledgement's counting, and the receive time of the response it handles */
void audit_on_ack(struct auditor *a, rd_kafka_t *rk, rd_kafka_message_t *m);
rd_kafka_resp_err_t audit_on_response_received(rd_kafka_t *rk, int sockfd, const char *brokername, int32_t brokerid,
                                               int16_t api_key, int16_t api_version, int32_t corr_id, size_t size,
                                               int64_t rtt, rd_kafka_resp_err_t err, void *ic_opaque);

/* header_pool.c: the stamp's header lists, recycled from acknowledgements to on_send */
/* A pooled list (its value and length in *value, *value_len), or NULL; under the send lock. */
rd_kafka_headers_t *header_pool_take(struct auditor *a, void **value, size_t *value_len);
/* m's list h (rd_kafka_message_headers, NULL: none), under the acknowledgement lock */
void header_pool_give(struct auditor *a, rd_kafka_message_t *m, rd_kafka_headers_t *h);
void header_pool_free(struct auditor *a);                         /* under both locks, at the end */

/* reader.c: auditors in reader mode (kafka.audit.emit=false), shared by the client instances of one id */
struct auditor *registry_attach(const char *id_text); /* the open auditor of that id, its refs + 1; or NULL */
void registry_add(struct auditor *a);                 /* refs = 1 */
int registry_detach(struct auditor *a);               /* refs - 1; returns the refs left (0: unregistered) */

/* avro_encode.c */
struct buf {
    unsigned char *p;
    size_t len, cap;
    int failed;
};
void buf_put(struct buf *b, const void *data, size_t n);
/* Append the single-object encoding (C3 01, fingerprint, body) of window w's snapshot. */
void encode_snapshot(struct buf *b, const struct auditor *a, const struct window *w, long long emitted_at_ms,
                     int final, int accounted);
double latency_percentile(const struct window *w, double q);
#endif
