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

    public func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}
