/* k8senv.h — what the Kubernetes suites share: a raw request to the API
 * server with the test's own credentials (not the engine's: the tests read
 * and change what the engine made, as an operator would), and a dotted
 * path into a JSON reply. */
#ifndef SANDBOXD_TEST_K8SENV_H
#define SANDBOXD_TEST_K8SENV_H

#include <cjson/cJSON.h>

#include "sandboxd/engine_kubernetes.h"

/* method path (below the server) with body (NULL: none) of content_type
 * (NULL: application/json, or application/merge-patch+json for PATCH).
 * Returns the HTTP status (0: no answer within 30 s); the body in *ret
 * (malloc'd) when ret is not NULL. */
long k8senv_api(const struct k8s_credentials *creds, const char *method, const char *path, const char *body,
                const char *content_type, char **ret);

/* o's member at a dotted path ("spec.nodeName"; a number indexes an array:
 * "spec.containers.0.name"), NULL when a part is missing. */
const cJSON *k8senv_jget(const cJSON *o, const char *path);

#endif
