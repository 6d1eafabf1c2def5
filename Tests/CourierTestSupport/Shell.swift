import Foundation

/// Runs a real tool (curl, zip, bsdtar, getfattr, ...) to completion and captures its output.
public enum Shell {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs `executable ARGS`; throws only if it cannot be started.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String], directory: URL? = nil) throws -> Result {
        let scratch = try TemporaryDirectory(prefix: "courier-shell")
        defer { scratch.remove() }
        let out = scratch.appending("stdout")
        let err = scratch.appending("stderr")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = directory }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        try process.run()
        process.waitUntilExit()
        return Result(
            status: process.exitStatus,
            stdout: (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        )
    }
}
