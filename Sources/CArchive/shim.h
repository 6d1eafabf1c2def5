#ifndef COURIER_CARCHIVE_SHIM_H
#define COURIER_CARCHIVE_SHIM_H

// libarchive for Swift. libarchive has no variadic API that Swift needs, so this header only
// gathers the includes; typed wrappers go here if one is ever needed (static inline, no logic).
// Only Sources/Courier/Packages imports this module.

#include <archive.h>
#include <archive_entry.h>
#include <locale.h>

#endif
