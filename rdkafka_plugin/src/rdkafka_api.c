/* Resolving librdkafka's functions from the copy already loaded in the process (see rdkafka_api.h). */
#include "rdkafka_api.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_COPIES 4

static struct rk_api tables[MAX_COPIES];
static int n_tables;
static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER;

static int find_by_name(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    char *out = data;
    if (info->dlpi_name && strstr(info->dlpi_name, "librdkafka") && !strstr(info->dlpi_name, "audit-plugin")) {
        snprintf(out, 512, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}


const struct rk_api *rk_api_resolve(const void *caller, char *errstr, size_t errstr_size) {
    char path[512] = "";
    Dl_info info;
    /* the object conf_init was called from: librdkafka itself, or a program or module that links it
     * statically (then its rd_kafka_* symbols must be exported) */
    if (caller && dladdr(caller, &info) && info.dli_fname && info.dli_fname[0])
        snprintf(path, sizeof path, "%s", info.dli_fname);
    if (!path[0])
        dl_iterate_phdr(find_by_name, path);
    if (!path[0]) {
        snprintf(errstr, errstr_size, "kafka-audit plugin: no librdkafka loaded in this process");
        return NULL;
    }
    void *handle = dlopen(path, RTLD_NOLOAD | RTLD_NOW);
    if (!handle) /* the main program (dladdr names it by its path, which dlopen does not match) */
        handle = dlopen(NULL, RTLD_NOW);
    if (!handle) {
        snprintf(errstr, errstr_size, "kafka-audit plugin: dlopen(%s, RTLD_NOLOAD): %s", path, dlerror());
        return NULL;
    }
    pthread_mutex_lock(&tables_lock);
    for (int i = 0; i < n_tables; i++) {
        if (tables[i].handle == handle) {
            pthread_mutex_unlock(&tables_lock);
            dlclose(handle); /* one reference kept by the table */
            return &tables[i];
        }
    }
    if (n_tables == MAX_COPIES) {
        pthread_mutex_unlock(&tables_lock);
        snprintf(errstr, errstr_size, "kafka-audit plugin: more than %d librdkafka copies loaded", MAX_COPIES);
        return NULL;
    }
    struct rk_api tmp;
    memset(&tmp, 0, sizeof tmp);
    struct rk_api *t = &tmp;
    t->handle = handle;
    snprintf(t->path, sizeof t->path, "%s", path);
    const struct rk_api *out = NULL;
    do {
#define R(field, symbol)                                                                           \
    *(void **)(&t->field) = dlsym(t->handle, symbol);                                              \
    if (!t->field) {                                                                               \
        snprintf(errstr, errstr_size, "kafka-audit plugin: %s has no %s (librdkafka >= 1.0 needed, linked " \
                 "dynamically or with its symbols exported)", t->path, symbol);                                                                          \
        break;                                                                                     \
    }
        R(conf_interceptor_add_on_conf_set, "rd_kafka_conf_interceptor_add_on_conf_set")
        R(conf_interceptor_add_on_conf_dup, "rd_kafka_conf_interceptor_add_on_conf_dup")
        R(conf_interceptor_add_on_conf_destroy, "rd_kafka_conf_interceptor_add_on_conf_destroy")
        R(conf_interceptor_add_on_new, "rd_kafka_conf_interceptor_add_on_new")
        R(interceptor_add_on_send, "rd_kafka_interceptor_add_on_send")
        R(interceptor_add_on_acknowledgement, "rd_kafka_interceptor_add_on_acknowledgement")
        R(interceptor_add_on_destroy, "rd_kafka_interceptor_add_on_destroy")
        R(conf_get, "rd_kafka_conf_get")
        R(conf_dump, "rd_kafka_conf_dump")
        R(conf_dump_free, "rd_kafka_conf_dump_free")
        R(conf_new, "rd_kafka_conf_new")
        R(conf_destroy, "rd_kafka_conf_destroy")
        R(conf_set, "rd_kafka_conf_set")
        R(conf_set_dr_msg_cb, "rd_kafka_conf_set_dr_msg_cb")
        R(conf_set_opaque, "rd_kafka_conf_set_opaque")
        R(kafka_new, "rd_kafka_new")
        R(kafka_destroy, "rd_kafka_destroy")
        R(producev, "rd_kafka_producev")
        R(poll, "rd_kafka_poll")
        R(flush, "rd_kafka_flush")
        R(outq_len, "rd_kafka_outq_len")
        R(opaque, "rd_kafka_opaque")
        R(version_str, "rd_kafka_version_str")
        R(err2name, "rd_kafka_err2name")
        R(err2str, "rd_kafka_err2str")
        R(type, "rd_kafka_type")
        R(message_headers, "rd_kafka_message_headers")
        R(message_set_headers, "rd_kafka_message_set_headers")
        R(headers_new, "rd_kafka_headers_new")
        R(header_add, "rd_kafka_header_add")
        R(header_remove, "rd_kafka_header_remove")
        R(header_get_last, "rd_kafka_header_get_last")
        R(header_cnt, "rd_kafka_header_cnt")
        R(header_get_all, "rd_kafka_header_get_all")
        R(message_detach_headers, "rd_kafka_message_detach_headers")
        R(headers_destroy, "rd_kafka_headers_destroy")
        R(message_timestamp, "rd_kafka_message_timestamp")
        R(topic_name, "rd_kafka_topic_name")
#undef R
        *(void **)(&t->interceptor_add_on_response_received) =
            dlsym(t->handle, "rd_kafka_interceptor_add_on_response_received"); /* optional */
        tables[n_tables] = tmp;
        out = &tables[n_tables++];
    } while (0);
    pthread_mutex_unlock(&tables_lock);
    if (!out)
        dlclose(handle);
    return out;
}
