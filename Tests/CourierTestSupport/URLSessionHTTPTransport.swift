import Courier
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A small `HTTPTransport` over URLSession for tests that need HTTP before (or without) the
/// libcurl transport. Loopback only, as every test.
public struct URLSessionHTTPTransport: HTTPTransport {
    public init() {}

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        var urlRequest = URLRequest(url: request.url, timeoutInterval: request.timeout)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.addValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let (data, response): (Data, URLResponse)
        do {
            (data, response) = try await URLSession.shared.data(for: urlRequest)
        } catch {
            throw CourierError(.network, "no answer from \(request.url.absoluteString)", cause: "\(error)")
        }
        guard let http = response as? HTTPURLResponse else {
            throw CourierError(.network, "not an HTTP answer from \(request.url.absoluteString)")
        }
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields { headers["\(name)".lowercased()] = "\(value)" }
        return HTTPResponse(status: http.statusCode, headers: headers, body: data)
    }
}
