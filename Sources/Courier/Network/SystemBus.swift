import CSystemd
import Foundation

/// One sd-bus connection, owned by one thread at a time (sd-bus objects are not thread-safe):
/// the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else /run/dbus/system_bus_socket) or the session
/// bus (`DBUS_SESSION_BUS_ADDRESS`). Only this folder speaks to libsystemd.
final class BusConnection {
    enum Kind { case system, session }

    /// A failed call: sd-bus's D-Bus error name (or the errno's text) and message.
    struct Failure: Error, CustomStringConvertible {
        var name: String
        var message: String
        var description: String { message.isEmpty ? name : "\(name): \(message)" }

        /// The well-known service is not on the bus (nothing owns the name).
        var serviceMissing: Bool {
            name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
        }

        init(name: String, message: String) {
            self.name = name
            self.message = message
        }

        /// From a negative errno sd-bus returned and the error it filled, if any.
        init(_ code: Int32, _ error: inout sd_bus_error, doing what: String) {
            if let errorName = error.name {
                name = String(cString: errorName)
                message = error.message.map { String(cString: $0) } ?? ""
            } else {
                name = "errno \(-code)"
                message = "\(what): \(String(cString: strerror(-code)))"
            }
            sd_bus_error_free(&error)
        }
    }

    private let bus: OpaquePointer

    /// The bus of `kind`, at `address` when given (a D-Bus address such as
    /// `unix:path=/run/…`), else where the environment says.
    init(_ kind: Kind, address: String? = nil) throws(Failure) {
        let which = kind == .system ? "system" : "session"
        var bus: OpaquePointer?
        var code: Int32
        if let address {
            code = sd_bus_new(&bus)
            if code >= 0 { code = sd_bus_set_address(bus, address) }
            if code >= 0 { code = sd_bus_set_bus_client(bus, 1) }
            if code >= 0 { code = sd_bus_start(bus) }
            if code < 0, let opened = bus {
                sd_bus_unref(opened)
                bus = nil
            }
        } else {
            code = kind == .system ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus)
        }
        guard code >= 0, let bus else {
            throw Failure(name: "errno \(-code)", message: "cannot connect to the \(which) bus: \(String(cString: strerror(-code)))")
        }
        self.bus = bus
    }

    deinit { sd_bus_flush_close_unref(bus) }

    /// A property of type `u` (uint32) of `object` on `service`.
    func uint32Property(service: String, object: String, interface: String, name: String) throws(Failure) -> UInt32 {
        var error = courier_sd_bus_error_null()
        var value: UInt32 = 0
        let code = sd_bus_get_property_trivial(bus, service, object, interface, name, &error, CChar(UInt8(ascii: "u")), &value)
        guard code >= 0 else { throw Failure(code, &error, doing: "reading \(interface).\(name)") }
        return value
    }

    /// A method call built by `append`, sent and answered within `timeout` seconds; returns the
    /// reply's first argument when it is a `u` (what Notify answers), else nil.
    func call(
        service: String, object: String, interface: String, method: String, timeout: Double,
        append: (OpaquePointer) -> Int32
    ) throws(Failure) -> UInt32? {
        var message: OpaquePointer?
        var code = sd_bus_message_new_method_call(bus, &message, service, object, interface, method)
        guard code >= 0, let message else {
            var none = courier_sd_bus_error_null()
            throw Failure(code, &none, doing: "building \(interface).\(method)")
        }
        defer { sd_bus_message_unref(message) }
        code = append(message)
        guard code >= 0 else {
            var none = courier_sd_bus_error_null()
            throw Failure(code, &none, doing: "building \(interface).\(method)")
        }
        var error = courier_sd_bus_error_null()
        var reply: OpaquePointer?
        code = sd_bus_call(bus, message, UInt64(max(timeout, 0) * 1_000_000), &error, &reply)
        guard code >= 0 else { throw Failure(code, &error, doing: "calling \(interface).\(method)") }
        defer { sd_bus_message_unref(reply) }
        var id: UInt32 = 0
        return sd_bus_message_read_basic(reply, CChar(UInt8(ascii: "u")), &id) > 0 ? id : nil
    }
}

/// Appending D-Bus arguments to a message under construction (sd_bus_message_append_basic and
/// containers, the non-variadic calls); each returns sd-bus's code, negative on failure.
enum BusArguments {
    static func string(_ message: OpaquePointer, _ value: String) -> Int32 {
        value.withCString { sd_bus_message_append_basic(message, CChar(UInt8(ascii: "s")), $0) }
    }

    static func uint32(_ message: OpaquePointer, _ value: UInt32) -> Int32 {
        var value = value
        return sd_bus_message_append_basic(message, CChar(UInt8(ascii: "u")), &value)
    }

    static func int32(_ message: OpaquePointer, _ value: Int32) -> Int32 {
        var value = value
        return sd_bus_message_append_basic(message, CChar(UInt8(ascii: "i")), &value)
    }

    /// An empty array of elements of `signature` ("s", "{sv}").
    static func emptyArray(_ message: OpaquePointer, of signature: String) -> Int32 {
        let opened = sd_bus_message_open_container(message, CChar(UInt8(ascii: "a")), signature)
        return opened < 0 ? opened : sd_bus_message_close_container(message)
    }
}
