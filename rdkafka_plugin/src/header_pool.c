/* The stamp's header lists, recycled: on_acknowledgement takes back a delivered record's header list when it
 * holds the plugin's stamp and nothing else, and on_send gives it to the next record without one.
 *
 * Why: a record without headers costs librdkafka three allocations for its stamp (rd_kafka_headers_new's
 * list and its element array, rd_kafka_header_add's header) and three frees when the delivery report is
 * destroyed; they were most of the plugin's cost per message (lab/bench/results/producer-rdkafka-plugin.txt,
 * session 33's profile: glibc malloc and free +~570 of +753 samples). A recycled list keeps all three: the
 * next stamp of the same length is written over the previous one in place, one of another length (the
 * sequence's varint grew a byte) replaces the header.
 *
 * Ownership: a record's headers belong to librdkafka once produce() returned successfully, and
 * rd_kafka_message_detach_headers() hands them to the caller. rdkafka.h calls the message immutable in
 * on_acknowledgement, as in on_send (plugin.c); detaching there is safe because of how librdkafka works, not
 * by its contract: an acknowledgement with err 0 is final (retried records leave the batch before the
 * delivery report, rd_kafka_dr_msgq0; the produce() failures that call on_acknowledgement all set an error),
 * the record's bytes were already copied into the request (rd_kafka_msgset_writer), and the only later reader
 * of rkm_headers is rd_kafka_msg_destroy, which checks for NULL (checked in librdkafka 2.0.2, kcat's, and the
 * current sources). An interceptor after this one and the application's delivery report then see no headers.
 * Only a successful acknowledgement recycles (a failed produce() may leave an application's header list in
 * the application's hands), and only a list of exactly one `~a` header: a record produced without headers,
 * with an empty list, or with a list holding only an upstream `~a` (replaced by this instance's); a list with
 * any other header is never taken. The value is written in place through the pointer
 * rd_kafka_header_get_all() returns (the list's one header, its name checked here: no strcmp call): a header
 * is one allocation whose value follows its name (rdkafka_header.h), its serialized size depends only on the
 * name's and the value's lengths (the message set writer asserts it), and nothing caches a message's header
 * size.
 *
 * Reading the list in on_acknowledgement (its count and its `~a` header) costs the broker thread the loads
 * that finding the window by key saves (acknowledgements.c); the whole is cheaper, measured against the build
 * before it in the same rounds: CPU over a bare producer +0.33 -> +0.25 us a 100-byte message, throughput +12%
 * (lab/bench/plugin_builds.py, lab/bench/results/producer-rdkafka-plugin.txt).
 *
 * Two stacks: the acknowledgement side's (under the acknowledgement lock, which on_acknowledgement holds
 * anyway) and on_send's (under the send lock); on_send swaps them when its own is empty and the other holds
 * at least HEADER_POOL_SWAP lists (read without the lock: a stale count only delays the swap), so it takes
 * the acknowledgement lock once per that many records at most. A stack grows by doubling with the records in
 * flight (one response acknowledges a whole batch at once: at 8,192 a stack, 14-20% of the lists of a
 * 100-byte run were still freed; at 32,768, 2%) and stays bounded: at most 2 x HEADER_POOL lists (three
 * allocations, ~170 bytes of heap each: ~11 MB with the stacks' arrays, after a burst of that many records in
 * flight) are pooled, and kept until the client is destroyed; the acknowledgements beyond that leave theirs
 * to librdkafka, as before. */
#include <stdlib.h>
#include <string.h>

#include "audit.h"

rd_kafka_headers_t *header_pool_take(struct auditor *a, void **value, size_t *value_len) {
    if (!a->send_pool.n) { /* swap with what the acknowledgements gave back, once there is enough of it */
        if (__atomic_load_n(&a->ack_pool.n, __ATOMIC_RELAXED) < HEADER_POOL_SWAP)
            return NULL;
        pthread_mutex_lock(&a->ack_lock);
        struct header_stack empty = a->send_pool;
        a->send_pool = a->ack_pool;
        a->ack_pool = empty;
        pthread_mutex_unlock(&a->ack_lock);
        if (!a->send_pool.n)
            return NULL;
    }
    struct pooled_header *e = &a->send_pool.e[--a->send_pool.n];
    *value = e->value;
    *value_len = e->value_len;
    return e->headers;
}

void header_pool_give(struct auditor *a, rd_kafka_message_t *m, rd_kafka_headers_t *h) {
    struct header_stack *st = &a->ack_pool;
    if (m->err || !h || a->closed || st->n >= HEADER_POOL)
        return;
    const struct rk_api *api = a->api;
    const char *name = NULL;
    const void *v = NULL;
    size_t len = 0;
    if (api->header_cnt(h) != 1 || api->header_get_all(h, 0, &name, &v, &len) || !name || name[0] != '~' ||
        name[1] != 'a' || name[2] || !v || len == 0)
        return;
    if (st->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 1024;
        struct pooled_header *e = realloc(st->e, (size_t)cap * sizeof *e);
        if (!e)
            return;
        st->e = e;
        st->cap = cap;
    }
    api->message_detach_headers(m, &h);
    struct pooled_header *e = &st->e[st->n];
    e->headers = h;
    e->value = (void *)(uintptr_t)v; /* the header is ours now: see above */
    e->value_len = len;
    __atomic_store_n(&st->n, st->n + 1, __ATOMIC_RELAXED); /* read without the lock by on_send */
}

static void free_stack(const struct rk_api *api, struct header_stack *st) {
    for (int i = 0; i < st->n; i++)
        api->headers_destroy(st->e[i].headers);
    free(st->e);
    memset(st, 0, sizeof *st);
}

void header_pool_free(struct auditor *a) {
    free_stack(a->api, &a->send_pool);
    free_stack(a->api, &a->ack_pool);
}
