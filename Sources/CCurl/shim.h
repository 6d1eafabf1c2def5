#ifndef COURIER_CCURL_SHIM_H
#define COURIER_CCURL_SHIM_H

// Typed wrappers around libcurl's variadic functions, which Swift cannot call directly.
// No logic lives here: each wrapper fixes the type of the variadic argument and nothing more.
// Only Sources/Courier/Transfer imports this module.

#include <curl/curl.h>
#include <sys/types.h>

/// The write and header callbacks' shape (CURLOPT_WRITEFUNCTION, CURLOPT_HEADERFUNCTION).
typedef size_t (*courier_curl_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
/// The progress callback's shape (CURLOPT_XFERINFOFUNCTION).
typedef int (*courier_curl_xferinfo_callback)(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
                                              curl_off_t ultotal, curl_off_t ulnow);

/// curl_easy_setopt for CURLOPT_OPENSOCKETFUNCTION.
static inline CURLcode courier_easy_setopt_opensocket_callback(CURL *handle, curl_opensocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

/// curl_easy_setopt for CURLOPT_SOCKOPTFUNCTION.
static inline CURLcode courier_easy_setopt_sockopt_callback(CURL *handle, curl_sockopt_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_SOCKOPTFUNCTION, callback);
}

/// curl_easy_setopt for options that take a long (CURLOPTTYPE_LONG).
static inline CURLcode courier_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

/// curl_easy_setopt for options that take a curl_off_t (CURLOPTTYPE_OFF_T).
static inline CURLcode courier_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

/// curl_easy_setopt for options that take a C string (CURLOPTTYPE_STRINGPOINT); libcurl copies it.
static inline CURLcode courier_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

/// curl_easy_setopt for options that take an object pointer (CURLOPTTYPE_OBJECTPOINT, SLISTPOINT).
static inline CURLcode courier_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

/// curl_easy_setopt for CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION.
static inline CURLcode courier_easy_setopt_data_callback(CURL *handle, CURLoption option,
                                                         courier_curl_data_callback callback) {
    return curl_easy_setopt(handle, option, callback);
}

/// curl_easy_setopt for CURLOPT_XFERINFOFUNCTION.
static inline CURLcode courier_easy_setopt_xferinfo_callback(CURL *handle,
                                                             courier_curl_xferinfo_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}

/// curl_easy_getinfo for CURLINFO_LONG values (response code, ...).
static inline CURLcode courier_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

/// curl_easy_getinfo for CURLINFO_OFF_T values (sizes, speeds, times in microseconds).
static inline CURLcode courier_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

/// curl_easy_getinfo for CURLINFO_STRING values (effective URL, content type, ...).
static inline CURLcode courier_easy_getinfo_string(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}

/// curl_easy_getinfo for CURLINFO_PRIVATE.
static inline CURLcode courier_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}

/// curl_multi_setopt for options that take a long (CURLMOPT_MAX_TOTAL_CONNECTIONS, ...).
static inline CURLMcode courier_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

/// The easy handle of a CURLMsg (a union member Swift cannot reach by name).
static inline CURLcode courier_multi_message_result(const CURLMsg *message) {
    return message->data.result;
}

#endif
