#ifndef COURIER_CSYSTEMD_SHIM_H
#define COURIER_CSYSTEMD_SHIM_H

// sd-bus (libsystemd) for D-Bus: NetworkManager's Metered property on the system bus and
// org.freedesktop.Notifications on the session bus. No logic lives here: the macros Swift cannot
// import become inline functions. Only Sources/Courier/Network imports this module.

#include <systemd/sd-bus.h>
#include <stdlib.h>

/// SD_BUS_ERROR_NULL: an empty error for a call to fill.
static inline sd_bus_error courier_sd_bus_error_null(void) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    return error;
}

#endif
