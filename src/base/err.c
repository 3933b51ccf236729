/* Errors as values: a code plus a message that names the file, the field and the value. */
#include "caldrix/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int cdx_err_set(cdx_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

int cdx_err_prefix(cdx_err *err, const char *fmt, ...)
{
    if (!err)
        return CDX_EINVAL;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    int n = snprintf(err->msg, sizeof err->msg, "%s: ", prefix);
    if (n > 0 && (size_t)n < sizeof err->msg)
        snprintf(err->msg + n, sizeof err->msg - (size_t)n, "%.*s", (int)(sizeof err->msg - (size_t)n - 1), old);
    return err->code;
}

const char *cdx_err_name(int code)
{
    switch (code) {
    case CDX_OK: return "ok";
#define CDX_X_CASE(name, val, text) case name: return text;
    CDX_ERRORS(CDX_X_CASE)
#undef CDX_X_CASE
    default: return "unknown error";
    }
}
