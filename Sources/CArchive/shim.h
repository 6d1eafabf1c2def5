#ifndef COURIER_CARCHIVE_SHIM_H
#define COURIER_CARCHIVE_SHIM_H

// libarchive for Swift, plus the locale call it needs (a function-like macro Swift cannot
// import). Typed `static inline` wrappers, no logic. Only Sources/Courier/Packages imports this
// module; the system calls of placement are in CSystemShims.

#include <archive.h>
#include <archive_entry.h>
#include <locale.h>

/// A C.UTF-8 LC_CTYPE locale for `uselocale`: libarchive converts entry names through the
/// calling thread's locale, so UTF-8 names survive whatever the process locale is.
/// `LC_CTYPE_MASK` is a macro Swift cannot import.
static inline locale_t courier_utf8_ctype_locale(void) {
    return newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

#endif
