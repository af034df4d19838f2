/* The librdkafka functions the plugin calls, resolved at conf_init from the librdkafka copy that loaded it.
 *
 * The plugin never links librdkafka (no -lrdkafka: no second copy in the process). A client may have loaded
 * its librdkafka with RTLD_LOCAL (the confluent-kafka wheel's bundled copy), whose symbols a dlopen()ed
 * plugin cannot see, so conf_init finds the loading library by the address it was called from (dladdr), or
 * failing that the first loaded object whose path contains "librdkafka" (dl_iterate_phdr), takes a handle
 * with dlopen(path, RTLD_NOLOAD | RTLD_NOW) and dlsym()s every function below into a table. Types and
 * constants come from rdkafka.h (Debian's librdkafka-dev); the functions used are in librdkafka's stable
 * ABI since 0.11.4 (headers) and 1.0 (interceptors). */
#ifndef KAFKA_AUDIT_RDKAFKA_API_H
#define KAFKA_AUDIT_RDKAFKA_API_H
#include <librdkafka/rdkafka.h>

struct rk_api {
    void *handle;
    char path[512];
    rd_kafka_resp_err_t (*conf_interceptor_add_on_conf_set)(rd_kafka_conf_t *, const char *,
                                                            rd_kafka_interceptor_f_on_conf_set_t *, void *);
    rd_kafka_resp_err_t (*conf_interceptor_add_on_conf_dup)(rd_kafka_conf_t *, const char *,
                                                            rd_kafka_interceptor_f_on_conf_dup_t *, void *);
    rd_kafka_resp_err_t (*conf_interceptor_add_on_conf_destroy)(rd_kafka_conf_t *, const char *,
                                                                rd_kafka_interceptor_f_on_conf_destroy_t *, void *);
    rd_kafka_resp_err_t (*conf_interceptor_add_on_new)(rd_kafka_conf_t *, const char *,
                                                       rd_kafka_interceptor_f_on_new_t *, void *);
    rd_kafka_resp_err_t (*interceptor_add_on_send)(rd_kafka_t *, const char *, rd_kafka_interceptor_f_on_send_t *,
                                                   void *);
    rd_kafka_resp_err_t (*interceptor_add_on_acknowledgement)(rd_kafka_t *, const char *,
                                                              rd_kafka_interceptor_f_on_acknowledgement_t *, void *);
    rd_kafka_resp_err_t (*interceptor_add_on_destroy)(rd_kafka_t *, const char *,
                                                      rd_kafka_interceptor_f_on_destroy_t *, void *);
    /* optional (librdkafka >= 1.6; NULL before): acknowledgements then read the clock each (acknowledgements.c) */
    rd_kafka_resp_err_t (*interceptor_add_on_response_received)(rd_kafka_t *, const char *,
                                                                rd_kafka_interceptor_f_on_response_received_t *,
                                                                void *);
    rd_kafka_conf_res_t (*conf_get)(const rd_kafka_conf_t *, const char *, char *, size_t *);
    const char **(*conf_dump)(rd_kafka_conf_t *, size_t *);
    void (*conf_dump_free)(const char **, size_t);
    rd_kafka_conf_t *(*conf_new)(void);
    void (*conf_destroy)(rd_kafka_conf_t *);
    rd_kafka_conf_res_t (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_set_dr_msg_cb)(rd_kafka_conf_t *,
                               void (*)(rd_kafka_t *, const rd_kafka_message_t *, void *));
    void (*conf_set_opaque)(rd_kafka_conf_t *, void *);
    rd_kafka_t *(*kafka_new)(rd_kafka_type_t, rd_kafka_conf_t *, char *, size_t);
    void (*kafka_destroy)(rd_kafka_t *);
    rd_kafka_resp_err_t (*producev)(rd_kafka_t *, ...);
    int (*poll)(rd_kafka_t *, int);
    rd_kafka_resp_err_t (*flush)(rd_kafka_t *, int);
    int (*outq_len)(rd_kafka_t *);
    void *(*opaque)(const rd_kafka_t *);
    const char *(*version_str)(void);
    const char *(*err2name)(rd_kafka_resp_err_t);
    const char *(*err2str)(rd_kafka_resp_err_t);
    rd_kafka_type_t (*type)(const rd_kafka_t *);
    rd_kafka_resp_err_t (*message_headers)(const rd_kafka_message_t *, rd_kafka_headers_t **);
    void (*message_set_headers)(rd_kafka_message_t *, rd_kafka_headers_t *);
    rd_kafka_headers_t *(*headers_new)(size_t);
    rd_kafka_resp_err_t (*header_add)(rd_kafka_headers_t *, const char *, ssize_t, const void *, ssize_t);
    rd_kafka_resp_err_t (*header_remove)(rd_kafka_headers_t *, const char *);
    rd_kafka_resp_err_t (*header_get_last)(const rd_kafka_headers_t *, const char *, const void **, size_t *);
    size_t (*header_cnt)(const rd_kafka_headers_t *);
    rd_kafka_resp_err_t (*header_get_all)(const rd_kafka_headers_t *, size_t, const char **, const void **,
                                          size_t *);
    rd_kafka_resp_err_t (*message_detach_headers)(rd_kafka_message_t *, rd_kafka_headers_t **);
    void (*headers_destroy)(rd_kafka_headers_t *);
    int64_t (*message_timestamp)(const rd_kafka_message_t *, rd_kafka_timestamp_type_t *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
};

/* Return the table for the librdkafka that contains `caller` (an address in it; NULL: search by name), or
 * NULL with a reason in errstr. Tables are kept for the process's life (one per librdkafka copy). */
const struct rk_api *rk_api_resolve(const void *caller, char *errstr, size_t errstr_size);

#endif
