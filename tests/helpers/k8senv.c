/* k8senv.c — the Kubernetes suites' raw API requests (k8senv.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "k8senv.h"

long k8senv_api(const struct k8s_credentials *creds, const char *method, const char *path, const char *body,
                const char *content_type, char **ret)
{
        char url[1024], auth[2048], ctype[160], *buf = NULL;
        size_t len = 0;
        long status = 0;
        FILE *out = open_memstream(&buf, &len);
        struct curl_slist *h = NULL;
        CURL *c = curl_easy_init();

        if (!content_type)
                content_type = strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json";
        snprintf(url, sizeof(url), "%s%s", creds->server, path);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        if (creds->ca_pem) {
                struct curl_blob b = {creds->ca_pem, creds->ca_len, CURL_BLOB_NOCOPY};
                curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
        }
        if (creds->cert_pem) {
                struct curl_blob cb = {creds->cert_pem, creds->cert_len, CURL_BLOB_NOCOPY};
                struct curl_blob kb = {creds->key_pem, creds->key_len, CURL_BLOB_NOCOPY};
                curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cb);
                curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &kb);
        }
        if (creds->token) {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", creds->token);
                h = curl_slist_append(h, auth);
        }
        snprintf(ctype, sizeof(ctype), "Content-Type: %s", content_type);
        h = curl_slist_append(h, ctype);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        if (body)
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(c) == CURLE_OK)
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        fclose(out);
        if (ret)
                *ret = buf;
        else
                free(buf);
        return status;
}

const cJSON *k8senv_jget(const cJSON *o, const char *path)
{
        char part[64];

        while (o && *path) {
                size_t n = strcspn(path, ".");
                if (n >= sizeof(part))
                        return NULL;
                memcpy(part, path, n);
                part[n] = '\0';
                o = cJSON_IsArray(o) && isdigit((unsigned char)part[0]) ? cJSON_GetArrayItem(o, atoi(part))
                                                                        : cJSON_GetObjectItemCaseSensitive(o, part);
                path += n + (path[n] == '.');
        }
        return o;
}
