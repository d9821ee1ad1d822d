/* apiclient.h — a tiny client of the API and admin line protocols for the
 * integration tests: connect to a Unix socket, send a line, read lines. */
#ifndef SANDBOXD_APICLIENT_H
#define SANDBOXD_APICLIENT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Connect; -errno on failure. */
int apic_connect(const char *path);
/* Send bytes as given (no newline added); 0 or -errno. */
int apic_send(int fd, const void *buf, size_t len);
/* One line (without '\n'), malloc'd; NULL at EOF or after timeout_ms. */
char *apic_read_line(int fd, int timeout_ms);
/* Build and send {"id": id, "token": token, "method": method, "params": params}
 * (params is consumed; token may be NULL to leave it out). */
void apic_request(int fd, int id, const char *token, const char *method, cJSON *params);
/* Read lines until the final reply (one with "ok"), collecting progress
 * events into *ret_progress (a JSON array, may be NULL). NULL on EOF/timeout. */
cJSON *apic_reply(int fd, int timeout_ms, cJSON **ret_progress);
/* request + reply on a fresh connection, closed afterwards. */
cJSON *apic_call(const char *path, const char *token, const char *method, cJSON *params);
/* The reply's error code ("" when ok, "?" when no reply). */
const char *apic_code(const cJSON *reply);
/* The reply's result object (NULL unless ok). */
const cJSON *apic_result(const cJSON *reply);
/* Shortcuts into a result. */
const char *apic_str(const cJSON *o, const char *key);
double apic_num(const cJSON *o, const char *key);
/* One admin command line on a fresh connection. */
cJSON *apic_admin(const char *path, const char *json_line);
/* cJSON params from a JSON text literal (asserts it parses). */
cJSON *apic_json(const char *text);

#endif
