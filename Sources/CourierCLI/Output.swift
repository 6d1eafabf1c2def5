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

    /// Prints one event of docs/json.md as a single NDJSON line: its fields beside `event` and
    /// `time` (when it was emitted: RFC 3339, UTC, milliseconds). The one writer of JSON lines.
    /// A value that cannot be encoded (a non-finite number) is not dropped silently: an `error`
    /// line says so, nothing is printed after it, and the command exits 1 (`encodingFailed`).
    func emit<Event: JSONEvent>(_ value: Event) {
        write(line: Envelope(value: value, time: NDJSONLogHandler.timestamp(Date())), kind: Event.event)
    }

    /// Prints a whole `--json` document (`list`, `status`, `content list`, `package`: one value,
    /// no `event`) as one line, through the same encoder as the events.
    func emit<Document: Encodable>(encodable value: Document) {
        write(line: value, kind: "document")
    }

    /// Set when a line could not be encoded: the command then ends with exit code 1.
    var encodingFailed: Bool { failed.load(ordering: .relaxed) }

    private let failed = Atomic<Bool>(false)

    /// The encoder of every JSON line: keys sorted, `/` not escaped, dates in RFC 3339.
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    /// An event's fields with its `event` and `time`.
    struct Envelope<Event: JSONEvent>: Encodable {
        var value: Event
        var time: String

        private enum Keys: String, CodingKey { case event, time }

        func encode(to encoder: any Encoder) throws {
            try value.encode(to: encoder)
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(Event.event, forKey: .event)
            try container.encode(time, forKey: .time)
        }
    }

    private func write<Value: Encodable>(line value: Value, kind: String) {
        guard !failed.load(ordering: .relaxed) else { return }  // nothing follows the error line
        do {
            let data = try Self.encoder().encode(value)
            line(String(decoding: data, as: UTF8.self))
        } catch {
            guard failed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
            let failure = ErrorEvent(
                code: CourierError.Code.internal.rawValue, message: "cannot write a `\(kind)` line as JSON",
                exitCode: 1, cause: CourierError.plainDescription(of: error))
            let envelope = Envelope(value: failure, time: NDJSONLogHandler.timestamp(Date()))
            if let data = try? Self.encoder().encode(envelope) {
                line(String(decoding: data, as: UTF8.self))
            }
        }
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

    /// Reports `error` (an `error` line with `--json`; `check` names a failed receipt check) and
    /// returns the exit code to end with.
    func report(_ error: any Error, check: String? = nil) -> ExitCode {
        if let error = error as? CourierError {
            if json {
                emit(
                    ErrorEvent(
                        code: error.code.rawValue, message: error.message, exitCode: error.exitCode, cause: error.cause, hint: error.hint,
                        check: check))
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
            emit(ErrorEvent(code: CourierError.Code.internal.rawValue, message: "\(error)", exitCode: 1))
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
            // A line that could not be encoded was said as an `error` line: exit 1.
            if output.encodingFailed { throw ExitCode.failure }
        } catch let error as ValidationError {
            throw error
        } catch let error as ExitCode {
            throw output.encodingFailed ? ExitCode.failure : error
        } catch {
            if output.encodingFailed { throw ExitCode.failure }
            throw output.report(error)
        }
    }
}
