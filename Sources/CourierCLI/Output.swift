import ArgumentParser
import Courier
import CourierServer
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Writes what the user sees: text on a terminal, JSON documents or NDJSON events with `--json`.
/// Serialised by a lock, so progress from any thread and results never interleave mid-line.
final class Output: Sendable {
    let json: Bool
    /// Whether standard error is a terminal (progress bars are drawn only there).
    let stderrIsTerminal: Bool
    /// Whether standard output is a terminal.
    let stdoutIsTerminal: Bool
    /// How many lines the transient status block on standard error has now (0: none drawn); its
    /// lock is held across every write.
    private let statusLines = Mutex(0)

    /// `--quiet`: no transient status, no notes (`info`); errors and results still print.
    let quiet: Bool

    init(json: Bool, quiet: Bool = false) {
        self.json = json
        self.quiet = quiet
        self.stderrIsTerminal = isatty(STDERR_FILENO) == 1
        self.stdoutIsTerminal = isatty(STDOUT_FILENO) == 1
    }

    /// Prints a line of text to standard output.
    func line(_ text: String) {
        write(text + "\n", to: STDOUT_FILENO)
    }

    /// Prints a line confirming that the command did what was asked ("saved …", "delivered …",
    /// "Nothing to do: …") on standard output, and nothing under `--quiet`: a cron job hears from
    /// Courier only when something failed, as from `curl -sS` and `apt-get -qq`. What a query
    /// command was asked for (`list`, `status`, `content list`) prints with `line` regardless.
    func done(_ text: String) {
        if !quiet { line(text) }
    }

    /// Prints a line of text to standard error.
    func note(_ text: String) {
        write(text + "\n", to: STDERR_FILENO)
    }

    /// Prints an informational note to standard error, unless `--quiet`.
    func info(_ text: String) {
        if !quiet { note(text) }
    }

    /// Prints one JSON value as a single line (an NDJSON event or the final document).
    /// Every event carries `time`, when it was emitted (RFC 3339, UTC, milliseconds; docs/json.md).
    func emit(_ object: [String: Any]) {
        var object = object
        if object["time"] == nil { object["time"] = NDJSONLogHandler.timestamp(Date()) }
        // Most events (strings, integers, booleans) are written by hand, the same bytes
        // JSONSerialization writes (JSONLine); the others go through it.
        if let bytes = JSONLine.encode(object) {
            return line(String(decoding: bytes, as: UTF8.self))
        }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]),
            let text = String(data: data, encoding: .utf8)
        else { return }
        line(text)
    }

    /// Prints an Encodable value as one JSON line; with `event`, as that NDJSON event (the value's
    /// fields beside `event` and `time`).
    func emit<T: Encodable>(encodable value: T, event: String? = nil) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        guard let data = try? encoder.encode(value) else { return }
        if let event, var object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] {
            object["event"] = event
            return emit(object)
        }
        line(String(decoding: data, as: UTF8.self))
    }

    /// Draws a transient block of status lines on the terminal (standard error), replacing the
    /// block drawn last. Lines should fit the terminal (`terminalColumns`), or the block drifts.
    func statusBlock(_ lines: [String]) {
        guard stderrIsTerminal, !json, !quiet, !lines.isEmpty else { return }
        statusLines.withLock { statusLines in
            // Back to the first column of the block drawn last, clear to the end of the screen.
            var text = "\r" + (statusLines > 1 ? "\u{1B}[\(statusLines - 1)A" : "") + "\u{1B}[J"
            text += lines.joined(separator: "\n")
            statusLines = lines.count
            writeLocked(text, to: STDERR_FILENO)
        }
    }

    /// Ends the transient status block so the next output starts on a fresh line below it.
    func endStatus() {
        guard stderrIsTerminal, !json else { return }
        statusLines.withLock { statusLines in
            guard statusLines > 0 else { return }
            statusLines = 0
            writeLocked("\n", to: STDERR_FILENO)
        }
    }

    /// The width of the terminal on standard error (80 when it cannot be told).
    var terminalColumns: Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    /// Reports `error` (a JSON document with `--json`, with `fields` added) and returns the exit
    /// code to end with.
    func report(_ error: any Error, fields: [String: Any] = [:]) -> ExitCode {
        if let error = error as? CourierError {
            if json {
                var object: [String: Any] = ["event": "error", "code": error.code.rawValue, "message": error.message]
                object.merge(fields) { $1 }
                if let cause = error.cause { object["cause"] = cause }
                if let hint = error.hint { object["hint"] = hint }
                object["exitCode"] = Int(error.exitCode)
                emit(object)
            } else {
                var text = "courier: \(error.message)"
                // Not "answered HTTP 404 (HTTP 404)": a cause the message already says is left out.
                if let cause = error.cause, !error.message.contains(cause) { text += " (\(cause))" }
                note(text)
                if let hint = error.hint { note("courier: \(hint)") }
            }
            return ExitCode(error.exitCode)
        }
        if json {
            emit(["event": "error", "code": CourierError.Code.internal.rawValue, "message": "\(error)", "exitCode": 1])
        } else {
            note("courier: \(error)")
        }
        return ExitCode.failure
    }

    private func write(_ text: String, to descriptor: Int32) {
        statusLines.withLock { statusLines in
            // Text on standard error while a status block is drawn starts below it.
            if descriptor == STDERR_FILENO, statusLines > 0 {
                statusLines = 0
                writeLocked("\n", to: STDERR_FILENO)
            }
            // A result on the same terminal takes the block's place; the next status draws below it.
            if descriptor == STDOUT_FILENO, statusLines > 0, stderrIsTerminal, stdoutIsTerminal {
                writeLocked("\r" + (statusLines > 1 ? "\u{1B}[\(statusLines - 1)A" : "") + "\u{1B}[J", to: STDERR_FILENO)
                statusLines = 0
            }
            writeLocked(text, to: descriptor)
        }
    }

    private func writeLocked(_ text: String, to descriptor: Int32) {
        _ = Array(text.utf8).withUnsafeBytes { writeAll(descriptor, $0) }
    }
}

extension GlobalOptions {
    /// Runs `body`, turning a thrown error into its message and the exit code of DESIGN.md.
    /// Usage errors from ArgumentParser (ValidationError) pass through unchanged.
    func run(_ body: (Output) async throws -> Void) async throws {
        let output = Output(json: json, quiet: quiet)
        do {
            try await body(output)
        } catch let error as ValidationError {
            throw error
        } catch let error as ExitCode {
            throw error
        } catch {
            throw output.report(error)
        }
    }
}
