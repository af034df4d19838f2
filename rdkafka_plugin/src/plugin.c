/* librdkafka interceptor plugin entry point and hooks (librdkafka CONFIGURATION.md `plugin.library.paths`;
 * rdkafka.h "Plugins" and "Interceptors").
 *
 * conf_init resolves librdkafka's functions from the copy that loaded the plugin (rdkafka_api.c) and adds
 * on_conf_set (the kafka.audit.* properties: an invalid value fails rd_kafka_conf_set() with the key and
 * the allowed values), on_conf_dup, on_conf_destroy and on_new. on_new, for a producer, adds on_send (the
 * v2 stamp header, docs/DESIGN.md "The audit stamp"), on_acknowledgement (counts) and on_destroy (final
 * snapshots) and starts the plugin's thread. Consumers are passed through untouched.
 *
 * on_send adds a header to the message although rdkafka.h calls it immutable there: rd_kafka_producev()
 * attaches the headers and the CreateTime before it calls on_send and enqueues the message only after the
 * partitioner, on the calling thread, so the header list is still the caller's own (tests check the stamp
 * arrives). Nothing here throws or blocks beyond the auditor's short locks: any failure leaves the message as it
 * was and is counted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "audit.h"

#define PREFIX "kafka.audit."
#define PRODUCER_PREFIX "kafka.audit.producer."
#define IC_NAME "kafka-audit"
#define EXPORT __attribute__((visibility("default")))

static const char *CONNECTION_PREFIXES[] = {"bootstrap.servers", "metadata.broker.list", "client.dns.lookup",
                                            "broker.address.family", "security.protocol", "ssl.", "sasl.", NULL};

static void settings_defaults(struct audit_settings *s, const struct rk_api *api) {
    memset(s, 0, sizeof *s);
    s->api = api;
    s->topic = strdup("__kafka_audit");
    s->window_ms = 60000;
    s->snapshot_interval_ms = 5000;
    s->grace_ms = 10000;
    s->delivery_margin_ms = 5000; /* audit_record.finality.DEFAULT_DELIVERY_MARGIN_MS */
    s->close_timeout_ms = 10000;
    s->max_windows = 1000;
    s->inflight_slots = 1 << 20;
    s->enabled = 1;
    s->emit = 1;
}

static void settings_free(struct audit_settings *s) {
    free(s->topic);
    for (int i = 0; i < s->n_overrides; i++) {
        free(s->override_keys[i]);
        free(s->override_values[i]);
    }
    free(s->override_keys);
    free(s->override_values);
    memset(s, 0, sizeof *s);
}

static int settings_copy(struct audit_settings *dst, const struct audit_settings *src) {
    *dst = *src;
    dst->topic = strdup(src->topic);
    dst->override_keys = calloc((size_t)src->n_overrides + 1, sizeof(char *));
    dst->override_values = calloc((size_t)src->n_overrides + 1, sizeof(char *));
    if (!dst->topic || !dst->override_keys || !dst->override_values)
        return -1;
    for (int i = 0; i < src->n_overrides; i++) {
        dst->override_keys[i] = strdup(src->override_keys[i]);
        dst->override_values[i] = strdup(src->override_values[i]);
    }
    return 0;
}

static int parse_number(const char *val, long long min, long long max, long long *out) {
    char *end;
    if (!val || !*val)
        return -1;
    long long n = strtoll(val, &end, 10);
    while (*end == ' ')
        end++;
    if (*end || n < min || n > max)
        return -1;
    *out = n;
    return 0;
}

static rd_kafka_conf_res_t set_override(struct audit_settings *s, rd_kafka_conf_t *conf, const char *key,
                                        const char *val, char *errstr, size_t errstr_size) {
    /* check it now with the same librdkafka, so a bad value fails here rather than in the audit thread */
    rd_kafka_conf_t *scratch = s->api->conf_new();
    char err[256];
    rd_kafka_conf_res_t r = s->api->conf_set(scratch, key, val, err, sizeof err);
    s->api->conf_destroy(scratch);
    (void)conf;
    if (r != RD_KAFKA_CONF_OK) {
        snprintf(errstr, errstr_size, "%s%s: %s", PRODUCER_PREFIX, key, err);
        return RD_KAFKA_CONF_INVALID;
    }
    for (int i = 0; i < s->n_overrides; i++) {
        if (!strcmp(s->override_keys[i], key)) {
            free(s->override_values[i]);
            s->override_values[i] = strdup(val);
            return RD_KAFKA_CONF_OK;
        }
    }
    char **k = realloc(s->override_keys, (size_t)(s->n_overrides + 1) * sizeof *k);
    if (k)
        s->override_keys = k;
    char **v = realloc(s->override_values, (size_t)(s->n_overrides + 1) * sizeof *v);
    if (v)
        s->override_values = v;
    if (!k || !v)
        return RD_KAFKA_CONF_INVALID;
    s->override_keys[s->n_overrides] = strdup(key);
    s->override_values[s->n_overrides++] = strdup(val);
    return RD_KAFKA_CONF_OK;
}

static rd_kafka_conf_res_t on_conf_set(rd_kafka_conf_t *conf, const char *name, const char *val, char *errstr,
                                       size_t errstr_size, void *ic_opaque) {
    struct audit_settings *s = ic_opaque;
    if (strncmp(name, PREFIX, strlen(PREFIX)))
        return RD_KAFKA_CONF_UNKNOWN;
    const char *key = name + strlen(PREFIX);
    long long n;
    struct {
        const char *key;
        long long min, max, *field;
    } numbers[] = {
        {"window.ms", 1, 1LL << 40, &s->window_ms},
        {"snapshot.interval.ms", 1, 1LL << 40, &s->snapshot_interval_ms},
        {"grace.ms", 0, 1LL << 40, &s->grace_ms},
        {"delivery.margin.ms", 0, 1LL << 40, &s->delivery_margin_ms},
        {"close.timeout.ms", 0, 600000, &s->close_timeout_ms},
    };
    if (!strncmp(name, PRODUCER_PREFIX, strlen(PRODUCER_PREFIX))) {
        if (!val) /* revert to default: drop nothing, keep it simple */
            return RD_KAFKA_CONF_OK;
        return set_override(s, conf, name + strlen(PRODUCER_PREFIX), val, errstr, errstr_size);
    }
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        if (strcmp(key, numbers[i].key))
            continue;
        if (parse_number(val, numbers[i].min, numbers[i].max, &n)) {
            snprintf(errstr, errstr_size, "Invalid value \"%s\" for configuration property \"%s\": allowed values: a "
                     "whole number from %lld to %lld", val ? val : "", name, numbers[i].min, numbers[i].max);
            return RD_KAFKA_CONF_INVALID;
        }
        *numbers[i].field = n;
        return RD_KAFKA_CONF_OK;
    }
    if (!strcmp(key, "max.windows") || !strcmp(key, "inflight.slots")) {
        int slots = !strcmp(key, "inflight.slots");
        long long min = slots ? 1024 : 1, max = slots ? 1LL << 26 : 30000;
        if (parse_number(val, min, max, &n)) {
            snprintf(errstr, errstr_size, "Invalid value \"%s\" for configuration property \"%s\": allowed values: a "
                     "whole number from %lld to %lld", val ? val : "", name, min, max);
            return RD_KAFKA_CONF_INVALID;
        }
        if (slots) {
            long long p = 1;
            while (p * 2 <= n)
                p *= 2;
            s->inflight_slots = (int)p;
        } else {
            s->max_windows = (int)n;
        }
        return RD_KAFKA_CONF_OK;
    }
    if (!strcmp(key, "enabled") || !strcmp(key, "emit")) {
        if (val && (!strcmp(val, "true") || !strcmp(val, "false"))) {
            *(!strcmp(key, "emit") ? &s->emit : &s->enabled) = !strcmp(val, "true");
            return RD_KAFKA_CONF_OK;
        }
        snprintf(errstr, errstr_size,
                 "Invalid value \"%s\" for configuration property \"%s\": allowed values: true, false",
                 val ? val : "", name);
        return RD_KAFKA_CONF_INVALID;
    }
    if (!strcmp(key, "id")) { /* audit_record.stamp's v2 text form: "~" + 16 lowercase hex digits */
        int ok = val && strlen(val) == 17 && val[0] == '~';
        for (int i = 1; ok && i < 17; i++)
            ok = (val[i] >= '0' && val[i] <= '9') || (val[i] >= 'a' && val[i] <= 'f');
        if (!ok) {
            snprintf(errstr, errstr_size, "Invalid value \"%s\" for configuration property \"%s\": allowed values: "
                     "\"~\" followed by 16 lowercase hex digits", val ? val : "", name);
            return RD_KAFKA_CONF_INVALID;
        }
        memcpy(s->id_text, val, 18);
        return RD_KAFKA_CONF_OK;
    }
    if (!strcmp(key, "topic")) {
        if (!val || !*val) {
            snprintf(errstr, errstr_size, "Invalid value \"\" for configuration property \"%s\": allowed values: a "
                     "non-empty topic name", name);
            return RD_KAFKA_CONF_INVALID;
        }
        char *t = strdup(val);
        if (!t)
            return RD_KAFKA_CONF_INVALID;
        free(s->topic);
        s->topic = t;
        return RD_KAFKA_CONF_OK;
    }
    snprintf(errstr, errstr_size,
             "No such configuration property: \"%s\" (the kafka-audit plugin knows kafka.audit.topic, window.ms, "
             "snapshot.interval.ms, grace.ms, delivery.margin.ms, close.timeout.ms, max.windows, inflight.slots, "
             "enabled, emit, id, producer.*)", name);
    return RD_KAFKA_CONF_INVALID;
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                  size_t errstr_size);
static rd_kafka_resp_err_t on_conf_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf, size_t filter_cnt,
                                       const char **filter, void *ic_opaque);

static rd_kafka_resp_err_t on_conf_destroy(void *ic_opaque) {
    struct audit_settings *s = ic_opaque;
    settings_free(s);
    free(s);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t add_conf_interceptors(rd_kafka_conf_t *conf, struct audit_settings *s) {
    const struct rk_api *api = s->api;
    api->conf_interceptor_add_on_conf_set(conf, IC_NAME, on_conf_set, s);
    api->conf_interceptor_add_on_conf_dup(conf, IC_NAME, on_conf_dup, s);
    api->conf_interceptor_add_on_conf_destroy(conf, IC_NAME, on_conf_destroy, s);
    return api->conf_interceptor_add_on_new(conf, IC_NAME, on_new, s);
}

static rd_kafka_resp_err_t on_conf_dup(rd_kafka_conf_t *new_conf, const rd_kafka_conf_t *old_conf, size_t filter_cnt,
                                       const char **filter, void *ic_opaque) {
    (void)old_conf, (void)filter_cnt, (void)filter;
    struct audit_settings *s = calloc(1, sizeof *s);
    if (!s || settings_copy(s, ic_opaque)) {
        free(s);
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    }
    return add_conf_interceptors(new_conf, s);
}

EXPORT rd_kafka_resp_err_t conf_init(rd_kafka_conf_t *conf, void **plug_opaquep, char *errstr, size_t errstr_size) {
    (void)plug_opaquep;
    const struct rk_api *api = rk_api_resolve(__builtin_return_address(0), errstr, errstr_size);
    if (!api)
        return RD_KAFKA_RESP_ERR__INVALID_ARG;
    struct audit_settings *s = calloc(1, sizeof *s);
    if (!s)
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    settings_defaults(s, api);
    return add_conf_interceptors(conf, s);
}

/* ---- per client instance ---- */

static char *conf_value(const struct rk_api *api, const rd_kafka_conf_t *conf, const char *name, const char *dflt) {
    char v[512];
    size_t n = sizeof v;
    if (api->conf_get(conf, name, v, &n) == RD_KAFKA_CONF_OK && v[0])
        return strdup(v);
    return strdup(dflt);
}

static int conf_int(const struct rk_api *api, const rd_kafka_conf_t *conf, const char *name, int dflt) {
    char *v = conf_value(api, conf, name, "");
    long long n;
    int out = v && !parse_number(v, -(1LL << 31), (1LL << 31) - 1, &n) ? (int)n : dflt;
    free(v);
    return out;
}

static int is_connection_key(const char *k) {
    for (int i = 0; CONNECTION_PREFIXES[i]; i++) {
        size_t n = strlen(CONNECTION_PREFIXES[i]);
        if (!strncmp(k, CONNECTION_PREFIXES[i], n) && (CONNECTION_PREFIXES[i][n - 1] == '.' || !k[n]))
            return 1;
    }
    return 0;
}

/* The host's connection and security settings that differ from librdkafka's defaults (the audit producer's). */
static void copy_connection(struct auditor *a, const rd_kafka_conf_t *conf) {
    const struct rk_api *api = a->api;
    rd_kafka_conf_t *dflt = api->conf_new();
    size_t n_host = 0, n_dflt = 0;
    const char **host = api->conf_dump((rd_kafka_conf_t *)conf, &n_host);
    const char **def = api->conf_dump(dflt, &n_dflt);
    a->connection_keys = calloc(n_host / 2 + 1, sizeof(char *));
    a->connection_values = calloc(n_host / 2 + 1, sizeof(char *));
    for (size_t i = 0; a->connection_keys && a->connection_values && i + 1 < n_host; i += 2) {
        if (!is_connection_key(host[i]))
            continue;
        int same = 0;
        for (size_t j = 0; j + 1 < n_dflt; j += 2)
            if (!strcmp(def[j], host[i]))
                same = !strcmp(def[j + 1], host[i + 1]);
        if (same)
            continue;
        a->connection_keys[a->n_connection] = strdup(host[i]);
        a->connection_values[a->n_connection++] = strdup(host[i + 1]);
    }
    api->conf_dump_free(host, n_host);
    api->conf_dump_free(def, n_dflt);
    api->conf_destroy(dflt);
}

static void read_report(struct auditor *a, const rd_kafka_conf_t *conf) {
    const struct rk_api *api = a->api;
    struct producer_report *r = &a->report;
    char *acks = conf_value(api, conf, "acks", "-1");
    snprintf(r->acks, sizeof r->acks, "%s", acks && (!strcmp(acks, "-1") || !strcmp(acks, "all")) ? "all"
                                             : acks ? acks : "all");
    free(acks);
    char *idem = conf_value(api, conf, "enable.idempotence", "false");
    r->enable_idempotence = idem && !strcmp(idem, "true");
    free(idem);
    char *linger = conf_value(api, conf, "linger.ms", "5");
    r->linger_ms = linger ? strtod(linger, NULL) : 5.0;
    free(linger);
    r->batch_num_messages = conf_int(api, conf, "batch.num.messages", 10000);
    r->message_timeout_ms = conf_int(api, conf, "message.timeout.ms", 300000);
    r->retries = conf_int(api, conf, "message.send.max.retries", 2147483647);
    r->retry_backoff_ms = conf_int(api, conf, "retry.backoff.ms", 100);
}

static rd_kafka_resp_err_t on_send(rd_kafka_t *rk, rd_kafka_message_t *m, void *ic_opaque);
static rd_kafka_resp_err_t on_ack(rd_kafka_t *rk, rd_kafka_message_t *m, void *ic_opaque);
static rd_kafka_resp_err_t on_destroy(rd_kafka_t *rk, void *ic_opaque);

/* The producer instance rk's hooks into auditor a (on_response_received where librdkafka has it, >= 1.6). */
static void add_hooks(const struct rk_api *api, rd_kafka_t *rk, struct auditor *a) {
    api->interceptor_add_on_send(rk, IC_NAME, on_send, a);
    api->interceptor_add_on_acknowledgement(rk, IC_NAME, on_ack, a);
    if (api->interceptor_add_on_response_received)
        api->interceptor_add_on_response_received(rk, IC_NAME, audit_on_response_received, a);
    api->interceptor_add_on_destroy(rk, IC_NAME, on_destroy, a);
}

static rd_kafka_resp_err_t on_new(rd_kafka_t *rk, const rd_kafka_conf_t *conf, void *ic_opaque, char *errstr,
                                  size_t errstr_size) {
    struct audit_settings *s = ic_opaque;
    const struct rk_api *api = s->api;
    if (!s->enabled || api->type(rk) != RD_KAFKA_PRODUCER)
        return RD_KAFKA_RESP_ERR_NO_ERROR; /* consumers: passed through (no on_consume tier yet) */
    struct auditor *a = !s->emit && s->id_text[0] ? registry_attach(s->id_text) : NULL;
    if (a) { /* reader mode: another instance of the same audited producer (a swap): one sequence, one count */
        add_hooks(api, rk, a);
        return RD_KAFKA_RESP_ERR_NO_ERROR;
    }
    a = aligned_alloc(CACHE_LINE, sizeof *a); /* its per-thread groups on cache lines of their own */
    if (a)
        memset(a, 0, sizeof *a);
    if (!a || settings_copy(&a->s, s)) {
        snprintf(errstr, errstr_size, "kafka-audit plugin: out of memory");
        free(a);
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    }
    a->api = api;
    pthread_mutex_init(&a->lock, NULL);
    pthread_mutex_init(&a->ack_lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    if (s->id_text[0]) {
        for (int i = 0; i < 8; i++) {
            unsigned v;
            sscanf(s->id_text + 1 + 2 * i, "%2x", &v);
            a->id[i] = (unsigned char)v;
        }
    } else if (getrandom(a->id, sizeof a->id, 0) != (ssize_t)sizeof a->id) {
        snprintf(errstr, errstr_size, "kafka-audit plugin: getrandom failed");
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    }
    a->id_text[0] = '~';
    for (int i = 0; i < 8; i++)
        sprintf(a->id_text + 1 + 2 * i, "%02x", a->id[i]);
    a->client_id = conf_value(api, conf, "client.id", "rdkafka");
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    a->host = strdup(host);
    a->process_id = getpid();
    a->started_at_ms = now_ms();
    char version[128];
    snprintf(version, sizeof version, "%s (librdkafka %s)", AUDIT_VERSION, api->version_str());
    a->library_version = strdup(version);
    read_report(a, conf);
    copy_connection(a, conf);
    a->ring_len = INITIAL_RING_SLOTS < (size_t)a->s.inflight_slots ? INITIAL_RING_SLOTS : (size_t)a->s.inflight_slots;
    a->ring = calloc(a->ring_len, sizeof *a->ring);
    a->by_slot = calloc((size_t)a->s.max_windows + 1, sizeof *a->by_slot);
    a->retired = calloc((size_t)a->s.max_windows, sizeof *a->retired);
    a->next_snapshot_ms = now_ms() + a->s.snapshot_interval_ms;
    if (!a->client_id || !a->host || !a->library_version || !a->ring || !a->by_slot || !a->retired) {
        snprintf(errstr, errstr_size, "kafka-audit plugin: out of memory");
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    }
    if (!a->s.emit) {
        registry_add(a); /* reader mode: the application reads the counts (reader.c); no snapshots, no thread */
    } else if (pthread_create(&a->thread, NULL, audit_thread, a)) {
        snprintf(errstr, errstr_size, "kafka-audit plugin: cannot start its thread");
        return RD_KAFKA_RESP_ERR__CRIT_SYS_RESOURCE;
    } else {
        a->thread_started = 1;
    }
    add_hooks(api, rk, a);
    if (a->s.emit)
        fprintf(stderr, "%%6|kafka-audit|%s: producer id %s, audit topic %s, window %lld ms (librdkafka %s)\n",
                a->client_id, a->id_text, a->s.topic, a->s.window_ms, api->version_str());
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* Replace the `~a` headers of list h, if any, with the stamp. */
static rd_kafka_resp_err_t replace_stamp(const struct rk_api *api, rd_kafka_headers_t *h, const unsigned char *stamp,
                                         size_t len) {
    api->header_remove(h, "~a");
    return api->header_add(h, "~a", 2, stamp, (ssize_t)len);
}

static rd_kafka_resp_err_t on_send(rd_kafka_t *rk, rd_kafka_message_t *m, void *ic_opaque) {
    (void)rk;
    struct auditor *a = ic_opaque;
    const struct rk_api *api = a->api;
    unsigned char stamp[17];
    size_t len;
    rd_kafka_timestamp_type_t tstype;
    long long ts = api->message_timestamp(m, &tstype);
    if (ts <= 0)
        ts = now_ms();
    rd_kafka_headers_t *h = NULL;
    int has_headers = api->message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR && h;
    struct pooled_header reuse = {0};
    if (audit_on_send(a, api->topic_name(m->rkt), ts, (long long)m->len, stamp, &len, has_headers ? NULL : &reuse))
        return RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__FAIL;
    if (has_headers) { /* an upstream stamp copied along is replaced: this instance's is the message's */
        err = replace_stamp(api, h, stamp, len);
    } else if ((h = reuse.headers)) { /* a recycled list of one stamp (header_pool.c) */
        if (reuse.value_len == len) {
            memcpy(reuse.value, stamp, len);
            err = RD_KAFKA_RESP_ERR_NO_ERROR;
        } else { /* the sequence's varint grew */
            err = replace_stamp(api, h, stamp, len);
        }
        api->message_set_headers(m, h);
    } else if ((h = api->headers_new(1))) {
        err = api->header_add(h, "~a", 2, stamp, (ssize_t)len);
        api->message_set_headers(m, h);
    }
    if (err) /* counted as sent but not stamped: its acknowledgement is placed by sequence (auditor.c) */
        __atomic_store_n(&a->unstamped, 1, __ATOMIC_RELAXED);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

static rd_kafka_resp_err_t on_ack(rd_kafka_t *rk, rd_kafka_message_t *m, void *ic_opaque) {
    audit_on_ack(ic_opaque, rk, m); /* counts it, and takes back its stamp's header list (header_pool.c) */
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/* The client is being destroyed: final snapshots, wait for them, stop the thread. The auditor itself stays
 * allocated (a few hundred bytes, its windows freed): acknowledgements of messages purged during the
 * destruction may still arrive, and find it closed. */
static rd_kafka_resp_err_t on_destroy(rd_kafka_t *rk, void *ic_opaque) {
    (void)rk;
    struct auditor *a = ic_opaque;
    if (!a->s.emit && registry_detach(a) > 0)
        return RD_KAFKA_RESP_ERR_NO_ERROR; /* reader mode: another instance still sends through it */
    pthread_mutex_lock(&a->lock);
    int started = a->thread_started;
    a->stop = 1;
    a->thread_started = 0;
    pthread_cond_signal(&a->wake);
    pthread_mutex_unlock(&a->lock);
    if (started)
        pthread_join(a->thread, NULL);
    pthread_mutex_lock(&a->lock);
    pthread_mutex_lock(&a->ack_lock);
    a->closed = 1;
    audit_free_windows(a);
    header_pool_free(a);
    free(a->ring);
    a->ring = NULL;
    a->ring_len = 0;
    pthread_mutex_unlock(&a->ack_lock);
    pthread_mutex_unlock(&a->lock);
    return RD_KAFKA_RESP_ERR_NO_ERROR;
}
