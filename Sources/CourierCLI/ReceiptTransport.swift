import Courier
import Foundation
import Logging

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The logger receipt commands hand to the library: quiet unless `COURIER_LOG` names a level.
enum ReceiptLogging {
    static let logger: Logger = {
        var logger = Logger(label: "courier.receipts")
        let level = ProcessInfo.processInfo.environment["COURIER_LOG"].flatMap { Logger.Level(rawValue: $0) }
        logger.logLevel = level ?? .critical
        return logger
    }()
}

/// The HTTP transport of the receipt commands (the verifyReceipt service).
///
/// Until the libcurl `CurlHTTPTransport` of Transfer/ is merged this is a small Foundation
/// transport; the merge replaces `makeReceiptTransport` with the libcurl one.
func makeReceiptTransport(_ configuration: CourierConfiguration) throws -> any HTTPTransport {
    FoundationReceiptTransport()
}

/// A minimal `HTTPTransport` over URLSession, for small JSON exchanges.
struct FoundationReceiptTransport: HTTPTransport {
    func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var urlRequest = URLRequest(url: request.url, timeoutInterval: request.timeout)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.addValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let (data, response): (Data, URLResponse)
        do {
            (data, response) = try await URLSession.shared.data(for: urlRequest)
        } catch {
            throw CourierError(.network, "no answer from \(request.url.host ?? request.url.absoluteString)", cause: "\(error)")
        }
        guard let http = response as? HTTPURLResponse else {
            throw CourierError(.network, "not an HTTP answer from \(request.url.absoluteString)")
        }
        guard data.count <= request.maxResponseBytes else {
            throw CourierError(.integrity, "the answer from \(request.url.absoluteString) is larger than \(request.maxResponseBytes) bytes")
        }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            headers["\(name)".lowercased()] = "\(value)"
        }
        return HTTPResponse(status: http.statusCode, headers: headers, body: data)
    }
}
