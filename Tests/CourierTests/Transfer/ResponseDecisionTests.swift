@testable import Courier
import Foundation
import Testing

@Suite("Transfer decisions without a network")
struct ResponseDecisionTests {
    let url = URL(string: "https://cdn.example.com/pack.zip")!

    @Test("header lines: line ends and HTTP's optional whitespace trimmed, names lowercased")
    func headerLines() {
        func text(_ raw: String) -> String {
            Array(raw.utf8).withUnsafeBytes { HTTPHeaderLine.text($0) }
        }
        #expect(text("HTTP/1.1 206 Partial Content\r\n") == "HTTP/1.1 206 Partial Content")
        #expect(text("\r\n") == "")
        #expect(text("") == "")
        #expect(text("Content-Length: 12\n") == "Content-Length: 12")
        #expect(HTTPHeaderLine.status("HTTP/1.1 206 Partial Content") == 206)
        #expect(HTTPHeaderLine.status("HTTP/2 404") == 404)
        #expect(HTTPHeaderLine.status("HTTP/1.1 2x6 Partial") == nil)
        #expect(HTTPHeaderLine.status("HTTP/1.1") == nil)
        #expect(HTTPHeaderLine.status("Content-Length: 12") == nil)
        #expect(HTTPHeaderLine.field("Content-Range: \t bytes 0-9/10 \t") ?? ("", "") == ("content-range", "bytes 0-9/10"))
        #expect(HTTPHeaderLine.field(" ETag :\"a:b\"") ?? ("", "") == ("etag", "\"a:b\""))
        #expect(HTTPHeaderLine.field("X-Empty:") ?? ("?", "?") == ("x-empty", ""))
        #expect(HTTPHeaderLine.field("Location: https://cdn.example.com/p\u{e9}.zip") ?? ("", "") == ("location", "https://cdn.example.com/p\u{e9}.zip"))
        #expect(HTTPHeaderLine.field("no colon here") == nil)
    }

    @Test("200 from the start is accepted; 200 to a Range starts over")
    func twoHundred() {
        let head = DownloadResponseHead(status: 200, contentLength: 1000)
        #expect(ResponseDecision.decide(head, requestedOffset: 0, knownTotal: nil, url: url) == .accept(offset: 0, total: 1000))
        #expect(ResponseDecision.decide(head, requestedOffset: 500, knownTotal: 1000, url: url) == .restartFromZero)
    }

    @Test("206 is accepted only when it starts where asked and its total is unchanged")
    func partialContent() {
        let good = DownloadResponseHead(status: 206, contentLength: 500, contentRange: "bytes 500-999/1000")
        #expect(ResponseDecision.decide(good, requestedOffset: 500, knownTotal: 1000, url: url) == .accept(offset: 500, total: 1000))
        let elsewhere = DownloadResponseHead(status: 206, contentLength: 600, contentRange: "bytes 400-999/1000")
        #expect(ResponseDecision.decide(elsewhere, requestedOffset: 500, knownTotal: 1000, url: url) == .restartFromZero)
        let resized = DownloadResponseHead(status: 206, contentLength: 700, contentRange: "bytes 500-1199/1200")
        #expect(ResponseDecision.decide(resized, requestedOffset: 500, knownTotal: 1000, url: url) == .restartFromZero)
        let noRange = DownloadResponseHead(status: 206, contentLength: 500)
        #expect(ResponseDecision.decide(noRange, requestedOffset: 500, knownTotal: 1000, url: url) == .restartFromZero)
    }

    @Test("416 is complete when the total equals what is on disk, else a change")
    func rangeNotSatisfiable() {
        let head = DownloadResponseHead(status: 416, contentRange: "bytes */1000")
        #expect(ResponseDecision.decide(head, requestedOffset: 1000, knownTotal: 1000, url: url) == .alreadyComplete)
        #expect(ResponseDecision.decide(head, requestedOffset: 1200, knownTotal: 1200, url: url) == .restartFromZero)
    }

    @Test("status codes map to the error codes of DESIGN.md")
    func statuses() {
        func code(_ status: Int) -> CourierError.Code? {
            switch ResponseDecision.decide(DownloadResponseHead(status: status), requestedOffset: 0, knownTotal: nil, url: url) {
            case .fail(let error): return error.code
            case .retry(_, let error): return error.code
            default: return nil
            }
        }
        #expect(code(401) == .serverRejected)
        #expect(code(403) == .notEntitled)
        #expect(code(404) == .serverRejected)
        #expect(code(410) == .serverRejected)
        #expect(code(400) == .serverRejected)
        #expect(code(302) == .network)
        if case .retry = ResponseDecision.decide(DownloadResponseHead(status: 503), requestedOffset: 0, knownTotal: nil, url: url) {
        } else {
            Issue.record("503 must be retried")
        }
        if case .fail(let error) = ResponseDecision.decide(DownloadResponseHead(status: 404), requestedOffset: 0, knownTotal: nil, url: url) {
            #expect(error.message.contains("404"))
        } else {
            Issue.record("404 must fail at once")
        }
    }

    @Test("Retry-After in seconds or as a date; backoff doubles, jitters and is capped")
    func retryTiming() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        #expect(ResponseDecision.parseRetryAfter("7", now: now) == 7)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let later = formatter.string(from: now.addingTimeInterval(120))
        #expect(ResponseDecision.parseRetryAfter(later, now: now) == 120)
        let backoff = RetryPolicy(maxRetries: 5, backoffBase: 1, backoffMax: 10)
        #expect(backoff.delay(retry: 1, retryAfter: nil, random: 0) == 0.5)
        #expect(backoff.delay(retry: 3, retryAfter: nil, random: 1) == 4)
        #expect(backoff.delay(retry: 10, retryAfter: nil, random: 1) == 10)
        #expect(backoff.delay(retry: 1, retryAfter: 60, random: 0) == 10)
        #expect(backoff.delay(retry: 1, retryAfter: 3, random: 0) == 3)
    }

    @Test("Content-Range parsing refuses nonsense")
    func contentRange() {
        #expect(ContentRange("bytes 0-9/10") == ContentRange("bytes 0-9/10"))
        #expect(ContentRange("bytes 0-9/10")?.total == 10)
        #expect(ContentRange("bytes 5-4/10") == nil)
        #expect(ContentRange("bytes 0-10/10") == nil)
        #expect(ContentRange("items 0-9/10") == nil)
        #expect(ContentRange("bytes 0-9/*")?.total == nil)
        #expect(ContentRange.unsatisfiedTotal("bytes */77") == 77)
    }

    @Test("loopback detection for the plain-http rule")
    func loopback() {
        #expect(URLPolicy.isLoopback(host: "127.0.0.1"))
        #expect(URLPolicy.isLoopback(host: "127.5.6.7"))
        #expect(URLPolicy.isLoopback(host: "localhost"))
        #expect(URLPolicy.isLoopback(host: "[::1]"))
        #expect(!URLPolicy.isLoopback(host: "127.0.0.1.example.com"))
        #expect(!URLPolicy.isLoopback(host: "example.com"))
        #expect(URLPolicy.isLoopback(host: "LocalHost"))
        #expect(URLPolicy.isLoopback(host: "[[::1]]"))
        #expect(!URLPolicy.isLoopback(host: "[::2]"))
        #expect(!URLPolicy.isLoopback(host: "128.0.0.1"))
        #expect(!URLPolicy.isLoopback(host: "127.0.0.256"))
        #expect(!URLPolicy.isLoopback(host: ""))
    }
}
