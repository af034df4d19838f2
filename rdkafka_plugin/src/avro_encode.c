/* The snapshots' Avro encoding, by hand (Avro 1.11 specification, "Binary Encoding" and "Single-object
 * encoding"): int/long as zigzag varints, strings as length + UTF-8, doubles as 8 little-endian bytes,
 * unions as the branch index then the value, arrays and maps as one block (count, items, 0). The field
 * order and the defaults of the fields the plugin does not fill come from the current .avsc through the
 * generated audit_record_ops.h (gen_audit_record.py), so a new schema version with defaulted fields needs
 * no change here. Checked against fastavro by tests/integration/test_rdkafka_plugin.py. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "audit.h"
#include "audit_record_ops.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "doubles are written in host order: a little-endian host is assumed"
#endif

void buf_put(struct buf *b, const void *data, size_t n) {
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 512;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_long(struct buf *b, long long v) {
    unsigned long long z = ((unsigned long long)v << 1) ^ (unsigned long long)(v >> 63);
    unsigned char out[10];
    size_t n = 0;
    while (z >= 0x80) {
        out[n++] = (unsigned char)(z & 0x7f) | 0x80;
        z >>= 7;
    }
    out[n++] = (unsigned char)z;
    buf_put(b, out, n);
}

static void put_str(struct buf *b, const char *s) {
    size_t n = s ? strlen(s) : 0;
    put_long(b, (long long)n);
    buf_put(b, s, n);
}

static void put_bool(struct buf *b, int v) {
    unsigned char c = v ? 1 : 0;
    buf_put(b, &c, 1);
}

static void put_double(struct buf *b, double d) {
    buf_put(b, &d, 8);
}

/* A [null, T] union: the null branch (0) or the value's branch. */
static void put_null(struct buf *b) {
    put_long(b, 0);
}

static void put_optional_long(struct buf *b, int branch, long long v, int present) {
    if (!present)
        return put_null(b);
    put_long(b, branch);
    put_long(b, v);
}

static void put_optional_double(struct buf *b, int branch, double v, int present) {
    if (!present)
        return put_null(b);
    put_long(b, branch);
    put_double(b, v);
}

/* LatencyHistogram.java's lower bound of a bucket, ms. */
static double bucket_lower_bound(int bucket) {
    if (bucket < 4)
        return 0.0;
    int bits = bucket / 4, sub = bucket % 4;
    return (double)(((1LL << (bits - 1)) * (4 + sub)) / 4);
}

double latency_percentile(const struct window *w, double q) {
    long long rank = (long long)(q * (double)w->latency_total);
    if ((double)rank < q * (double)w->latency_total)
        rank++;
    if (rank < 1)
        rank = 1;
    long long seen = 0;
    for (int i = 0; i < LATENCY_BUCKETS; i++) {
        seen += w->latency[i];
        if (seen >= rank)
            return bucket_lower_bound(i);
    }
    return 0.0;
}

static void producer_config(struct buf *b, const struct auditor *a) {
    const struct producer_report *r = &a->report;
    for (int i = 0; i < PRODUCERCONFIG_N_OPS; i++) {
        const struct field_op *op = &PRODUCERCONFIG_OPS[i];
        switch (op->id) {
        case F_PRODUCERCONFIG_ACKS: put_str(b, r->acks); break;
        case F_PRODUCERCONFIG_ENABLE_IDEMPOTENCE: put_bool(b, r->enable_idempotence); break;
        case F_PRODUCERCONFIG_BATCH_NUM_MESSAGES: put_optional_long(b, op->branch, r->batch_num_messages, 1); break;
        case F_PRODUCERCONFIG_LINGER_MS: put_double(b, r->linger_ms); break;
        case F_PRODUCERCONFIG_MESSAGE_TIMEOUT_MS: put_long(b, r->message_timeout_ms); break;
        case F_PRODUCERCONFIG_MESSAGE_SEND_MAX_RETRIES: put_long(b, r->retries); break;
        case F_PRODUCERCONFIG_RETRY_BACKOFF_MS: put_long(b, r->retry_backoff_ms); break;
        default: buf_put(b, op->dflt, op->dflt_len);
        }
    }
}

static void producer_identity(struct buf *b, const struct auditor *a) {
    for (int i = 0; i < PRODUCERIDENTITY_N_OPS; i++) {
        const struct field_op *op = &PRODUCERIDENTITY_OPS[i];
        switch (op->id) {
        case F_PRODUCERIDENTITY_CLIENT_ID: put_str(b, a->client_id); break;
        case F_PRODUCERIDENTITY_HOST: put_str(b, a->host); break;
        case F_PRODUCERIDENTITY_PROCESS_ID: put_long(b, a->process_id); break;
        case F_PRODUCERIDENTITY_STARTED_AT_MS: put_long(b, a->started_at_ms); break;
        case F_PRODUCERIDENTITY_LIBRARY: put_str(b, AUDIT_LIBRARY); break;
        case F_PRODUCERIDENTITY_LIBRARY_VERSION: put_str(b, a->library_version); break;
        case F_PRODUCERIDENTITY_STAMP_VERSION: put_long(b, 2); break;
        default: buf_put(b, op->dflt, op->dflt_len);
        }
    }
}

static void partition_delivery(struct buf *b, const struct auditor *a, int p, const struct partition_counts *c) {
    for (int i = 0; i < PARTITIONDELIVERY_N_OPS; i++) {
        const struct field_op *op = &PARTITIONDELIVERY_OPS[i];
        switch (op->id) {
        case F_PARTITIONDELIVERY_PARTITION: put_long(b, p); break;
        case F_PARTITIONDELIVERY_ACKNOWLEDGED: put_long(b, c->acknowledged); break;
        case F_PARTITIONDELIVERY_FAILED: put_long(b, c->failed); break;
        case F_PARTITIONDELIVERY_FAILED_BY_ERROR:
            if (c->n_errors) {
                put_long(b, c->n_errors);
                for (int e = 0; e < c->n_errors; e++) {
                    put_str(b, a->api->err2name((rd_kafka_resp_err_t)c->errors[e].err));
                    put_long(b, c->errors[e].n);
                }
            }
            put_long(b, 0);
            break;
        case F_PARTITIONDELIVERY_LAST_OFFSET:
            put_optional_long(b, op->branch, c->last_offset, c->last_offset >= 0);
            break;
        default: buf_put(b, op->dflt, op->dflt_len);
        }
    }
}

static void record_id(char out[33]) {
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)rand();
    }
    r[6] = (r[6] & 0x0f) | 0x40; /* uuid4: version 4, RFC 4122 variant */
    r[8] = (r[8] & 0x3f) | 0x80;
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", r[i]);
}

void encode_snapshot(struct buf *b, const struct auditor *a, const struct window *w, long long emitted_at_ms,
                     int final, int accounted) {
    static const unsigned char magic[2] = {0xc3, 0x01};
    char rid[33];
    buf_put(b, magic, 2);
    buf_put(b, AUDIT_RECORD_FINGERPRINT, 8);
    long long acknowledged = w->acknowledged;
    if (acknowledged > w->sent - w->failed)
        acknowledged = w->sent - w->failed;
    int has_latency = w->latency_total > 0;
    for (int i = 0; i < AUDITRECORD_N_OPS; i++) {
        const struct field_op *op = &AUDITRECORD_OPS[i];
        switch (op->id) {
        case F_AUDITRECORD_RECORD_ID: record_id(rid); put_str(b, rid); break;
        case F_AUDITRECORD_TIER: put_str(b, "producer"); break;
        case F_AUDITRECORD_SOURCE: put_str(b, a->client_id); break;
        case F_AUDITRECORD_HOST: put_str(b, a->host); break;
        case F_AUDITRECORD_PRODUCER_ID: put_long(b, op->branch); put_str(b, a->id_text); break;
        case F_AUDITRECORD_TOPIC: put_str(b, w->topic); break;
        case F_AUDITRECORD_PARTITION: put_long(b, -1); break;
        case F_AUDITRECORD_WINDOW_START_MS: put_long(b, w->start); break;
        case F_AUDITRECORD_WINDOW_END_MS: put_long(b, w->end); break;
        case F_AUDITRECORD_EMITTED_AT_MS: put_long(b, emitted_at_ms); break;
        case F_AUDITRECORD_FINAL: put_bool(b, final); break;
        case F_AUDITRECORD_SENT: put_long(b, w->sent); break;
        case F_AUDITRECORD_ACKNOWLEDGED: put_long(b, acknowledged); break;
        case F_AUDITRECORD_FAILED: put_long(b, w->failed); break;
        case F_AUDITRECORD_FIRST_SEQUENCE:
            put_optional_long(b, op->branch, w->first_sequence, w->first_sequence >= 0);
            break;
        case F_AUDITRECORD_LAST_SEQUENCE:
            put_optional_long(b, op->branch, w->last_sequence, w->last_sequence >= 0);
            break;
        case F_AUDITRECORD_BYTES: put_long(b, w->bytes); break;
        case F_AUDITRECORD_LATENCY_P50_MS:
            put_optional_double(b, op->branch, has_latency ? latency_percentile(w, 0.5) : 0, has_latency);
            break;
        case F_AUDITRECORD_LATENCY_P99_MS:
            put_optional_double(b, op->branch, has_latency ? latency_percentile(w, 0.99) : 0, has_latency);
            break;
        case F_AUDITRECORD_LATENCY_MAX_MS:
            put_optional_double(b, op->branch, (double)(w->latency_max > 0 ? w->latency_max : 0), has_latency);
            break;
        case F_AUDITRECORD_PRODUCER_CONFIG: put_long(b, op->branch); producer_config(b, a); break;
        case F_AUDITRECORD_PARTITIONS: {
            int n = 0;
            for (int p = 0; p < w->n_partitions; p++)
                n += w->partitions[p].present;
            if (n) {
                put_long(b, n);
                for (int p = 0; p < w->n_partitions; p++)
                    if (w->partitions[p].present)
                        partition_delivery(b, a, p - 1, &w->partitions[p]);
            }
            put_long(b, 0);
            break;
        }
        case F_AUDITRECORD_PRODUCER_IDENTITY: put_long(b, op->branch); producer_identity(b, a); break;
        case F_AUDITRECORD_ACCOUNTED: put_bool(b, accounted); break;
        default: buf_put(b, op->dflt, op->dflt_len);
        }
    }
}
