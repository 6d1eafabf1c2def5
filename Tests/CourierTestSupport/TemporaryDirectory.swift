import Foundation

/// A fresh folder under the system's temporary directory, removed by `remove()`.
/// Each test makes its own, so tests never share storage.
public struct TemporaryDirectory: Sendable {
    public let url: URL

    public init(prefix: String = "courier-test") throws {
        let base = URL(fileURLWithPath: NSTemporaryDirectory(), isDirectory: true)
        let url = base.appendingPathComponent("\(prefix)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        self.url = url
    }

    public var path: String { url.path }

    public func appending(_ component: String) -> URL {
        url.appendingPathComponent(component)
    }

    /// Removes the folder and what it holds. Something of the test may still be closing a file
    /// in it (an SQLite connection released after the test's last use of it, a child process
    /// ending): the removal then meets a file it did not list and fails, leaving the folder
    /// behind. So it tries again for up to a second; on standard error it says when it had to,
    /// and what it could not remove (a test that leaves something running in its folder).
    public func remove() {
        var firstError: (any Error)?
        for attempt in 1...20 {
            do {
                try FileManager.default.removeItem(at: url)
                if let firstError {
                    Self.note("removed the test folder \(url.path) at attempt \(attempt); the first failed: \(firstError)")
                }
                return
            } catch {
                guard FileManager.default.fileExists(atPath: url.path) else { return }
                firstError = firstError ?? error
                usleep(50_000)
            }
        }
        Self.note("cannot remove the test folder \(url.path): \(firstError.map { "\($0)" } ?? "")")
    }

    private static func note(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
